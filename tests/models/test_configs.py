"""Presets, their gin files, validation messages, and the published parameter counts."""

import dataclasses
import re
from pathlib import Path

import gin
import jax
import numpy as np
import pytest

import t5forge
from t5forge.errors import ConfigError
from t5forge.interop.gin_model_config import config_from_gin, config_from_gin_file
from t5forge.models.configs import T5Config
from t5forge.models.model import build_model
from t5forge.models.presets import PRESETS, get_config

GIN_ROOT = Path(t5forge.__file__).parent / "configs" / "models"

# Hugging Face parameter counts (untied lm_head where the model has one).
PUBLISHED = {
    "t5_1_1/small": 76_961_152,
    "t5_1_1/base": 247_577_856,
    "t5_1_1/large": 783_150_080,
    "t5_1_1/xl": 2_849_757_184,
    "t5_1_1/xxl": 11_135_332_352,
    "t5_1_0/small": 60_506_624,
    "t5_1_0/base": 222_903_552,
    "t5_1_0/large": 737_668_096,
    "t5_1_0/3B": 2_851_598_336,
    "t5_1_0/11B": 11_307_321_344,
    "mt5/small": 300_176_768,
    "mt5/base": 582_401_280,
    "mt5/large": 1_229_581_312,
    "mt5/xl": 3_742_619_648,
    "mt5/xxl": 12_921_057_280,
    "byt5/small": 299_637_760,
    # The figures quoted for ByT5 base..xxl (581,651,520 / 1,228,491,264 / 3,740,398,080 /
    # 12,916,656,384) do not follow from google/byt5-*'s config.json (d_model, d_ff, heads and
    # layers as in our presets); these are the counts those configs give.
    "byt5/base": 581_653_248,
    "byt5/large": 1_228_183_552,
    "byt5/xl": 3_737_801_728,
    "byt5/xxl": 12_906_899_328,
}


def formula_count(c: T5Config) -> int:
    """Parameters of a T5 network by closed form, independent of the flax code."""
    attention = 4 * c.emb_dim * c.num_heads * c.head_dim
    mlp = (len(c.mlp_activations) + 1) * c.emb_dim * c.mlp_dim
    table = c.num_heads * c.relative_attention_num_buckets
    layer_relpos, stack_relpos = (table, 0) if c.relative_attention_per_layer else (0, table)
    decoder_layer = (
        attention * (1 if c.is_decoder_only else 2)
        + mlp
        + c.emb_dim * (2 if c.is_decoder_only else 3)
        + layer_relpos
    )
    total = c.vocab_size * c.emb_dim * (1 if c.logits_via_embedding else 2)
    total += c.num_decoder_layers * decoder_layer + stack_relpos + c.emb_dim
    if not c.is_decoder_only:
        encoder_layer = attention + mlp + 2 * c.emb_dim + layer_relpos
        total += c.num_encoder_layers * encoder_layer + stack_relpos + c.emb_dim
    return total


def eval_shape_count(config: T5Config) -> int:
    leaves = jax.tree_util.tree_leaves(build_model(config).abstract_params())
    return sum(int(np.prod(leaf.shape)) for leaf in leaves)


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_published_parameter_counts(name):
    # Scanned layers hold the same params and trace much faster, so big presets stay quick.
    config = get_config(name, scan_layers=True)
    assert eval_shape_count(config) == formula_count(config) == PUBLISHED[name]


def test_umt5_counts_one_relative_table_per_layer():
    config = get_config("umt5/small")
    tables = (config.num_encoder_layers + config.num_decoder_layers) * config.num_heads * 32
    assert (
        eval_shape_count(config)
        == formula_count(config)
        == (
            PUBLISHED["mt5/small"]
            + (256384 - 250112) * 512 * 2
            + tables
            - 2 * config.num_heads * 32
        )
    )


def test_scanned_and_unscanned_layouts_count_the_same():
    config = get_config("t5_1_0/small")
    assert (
        eval_shape_count(config)
        == eval_shape_count(dataclasses.replace(config, scan_layers=True))
        == PUBLISHED["t5_1_0/small"]
    )


def test_every_family_has_its_sizes():
    families = {}
    for name in PRESETS:
        family, size = name.split("/")
        families.setdefault(family, set()).add(size)
    t5_sizes = {"tiny", "small", "base", "large", "xl", "xxl"}
    assert families["t5_1_0"] == {"tiny", "small", "base", "large", "3B", "11B"}
    for family in ("t5_1_1", "mt5", "byt5", "decoder_only"):
        assert families[family] == t5_sizes
    assert families["umt5"] == t5_sizes - {"tiny"}
    assert all(
        PRESETS[f"umt5/{s}"].scan_layers and PRESETS[f"umt5/{s}"].relative_attention_per_layer
        for s in families["umt5"]
    )
    assert all(PRESETS[f"decoder_only/{s}"].num_encoder_layers == 0 for s in t5_sizes)


# T5Gemma's gin files are checked against their published counts in test_t5gemma_presets.py;
# formula_count knows T5's layout only.
@pytest.mark.parametrize("name", sorted(n for n in PRESETS if not n.startswith("t5gemma/")))
def test_gin_file_binds_exactly_the_preset(name):
    path = GIN_ROOT / f"{name}.gin"
    text = path.read_text()
    header = re.match(r"# (\S+): .*?([\d,]+) parameters\.", text)
    assert header and header.group(1) == name
    assert int(header.group(2).replace(",", "")) == formula_count(PRESETS[name])
    gin.clear_config()
    try:
        gin.parse_config_file(str(path))
        assert config_from_gin() == PRESETS[name]
        gin.bind_parameter("%DROPOUT_RATE", 0.1)
        assert config_from_gin().dropout_rate == 0.1
    finally:
        gin.clear_config()


def test_a_written_config_gin_reads_back(tmp_path):
    """A run's config.gin names the class with its module (`configs.T5Config.*`) once T5X's
    `network.T5Config` is registered beside it; `t5forge.load(config=...)` reads it back here."""
    tiny = PRESETS["t5_1_1/tiny"]
    (tmp_path / "config.gin").write_text(
        "".join(
            f"configs.T5Config.{field.name} = {getattr(tiny, field.name)!r}\n"
            for field in dataclasses.fields(tiny)
        )
    )
    gin.clear_config()
    try:
        assert config_from_gin_file(tmp_path / "config.gin") == tiny
    finally:
        gin.clear_config()


def test_a_model_gin_file_reads_after_a_run_locked_gin(tmp_path):
    """A run in this process (t5forge.train from Python, a notebook) finalizes gin's config;
    `t5forge.load(config=<gin file>)` afterwards reads the file all the same."""
    tiny = PRESETS["t5_1_1/tiny"]
    (tmp_path / "tiny.gin").write_text(
        "".join(
            f"T5Config.{field.name} = {getattr(tiny, field.name)!r}\n"
            for field in dataclasses.fields(tiny)
        )
    )
    gin.clear_config()
    gin.finalize()
    try:
        assert config_from_gin_file(tmp_path / "tiny.gin") == tiny
        assert gin.config_is_locked(), "the run's lock stays as it was"
    finally:
        with gin.unlock_config():
            gin.clear_config()
        gin.config._set_config_is_locked(False)


def test_an_include_found_on_a_search_path_logs_no_errors(tmp_path, monkeypatch, caplog):
    """gin logs "Path not found" at ERROR for each place an include is not; a file it finds
    on a later search path is no error, so the reader leaves those lines out."""
    tiny = PRESETS["t5_1_1/tiny"]
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "base.gin").write_text(
        "".join(
            f"T5Config.{field.name} = {getattr(tiny, field.name)!r}\n"
            for field in dataclasses.fields(tiny)
        )
    )
    (tmp_path / "model.gin").write_text("include 'base.gin'\nT5Config.num_heads = 2\n")
    monkeypatch.setattr(gin.config, "_LOCATION_PREFIXES", ["", str(tmp_path / "lib")])
    monkeypatch.chdir(tmp_path)
    gin.clear_config()
    try:
        config = config_from_gin_file(tmp_path / "model.gin")
    finally:
        gin.clear_config()
    assert config == dataclasses.replace(tiny, num_heads=2)
    assert not [r for r in caplog.records if r.levelname == "ERROR"], caplog.text


def test_gin_files_and_presets_are_the_same_set():
    on_disk = {str(p.relative_to(GIN_ROOT).with_suffix("")) for p in GIN_ROOT.rglob("*.gin")}
    assert on_disk == set(PRESETS)


def test_get_config_overrides_and_suggests_close_names():
    config = get_config("t5_1_1/base", dropout_rate=0.1, dtype="float32")
    assert (config.emb_dim, config.dropout_rate, config.dtype) == (768, 0.1, "float32")
    with pytest.raises(
        ConfigError,
        match=r"unknown model config 't5_11/base'; did you mean "
        r"t5_1_1/base",
    ):
        get_config("t5_11/base")
    with pytest.raises(ConfigError, match=r"unknown T5Config field\(s\) \['emb_size'\]"):
        get_config("t5_1_1/base", emb_size=3)


@pytest.mark.parametrize(
    "overrides,message",
    [
        ({"emb_dim": 0}, "T5Config.emb_dim must be a positive integer, got 0"),
        ({"dtype": "float16"}, "T5Config.dtype must be one of"),
        ({"remat_policy": "some"}, "T5Config.remat_policy must be one of"),
        ({"mlp_activations": ("gelu", "swishy")}, r"unknown \['swishy'\]"),
        ({"dropout_rate": 1.0}, r"dropout_rate must be in \[0, 1\)"),
        ({"architecture": "decoder_only"}, "num_encoder_layers must be 0 for a decoder_only"),
        ({"architecture": "encoder"}, "T5Config.architecture must be one of"),
    ],
)
def test_invalid_fields_are_config_errors(overrides, message):
    with pytest.raises(ConfigError, match=message):
        get_config("t5_1_1/tiny", **overrides)


def test_config_is_hashable_with_gin_style_lists():
    config = get_config("t5_1_1/tiny", mlp_activations=["relu"])
    assert config.mlp_activations == ("relu",)
    assert hash(config) == hash(get_config("t5_1_1/tiny", mlp_activations=("relu",)))
