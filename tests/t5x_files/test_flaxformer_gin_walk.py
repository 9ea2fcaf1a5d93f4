"""Flaxformer's own 80 gin files, unchanged, under t5forge (../shared/flaxformer_gin, at 399ea3a).

Every file is parsed and checked in this process with T5X's run files and a user's tiny
overrides (flaxformer_gin_commands.py), and the outcome must be its row of the table
(flaxformer_gin_states.py). Each T5 model file, at its own sizes, builds the T5Config of
t5forge's preset of the same name; LongT5's and the MoE models' bindings reach the T5Config
fields of those features (while the fields are missing, through the one-line refusal that
names the feature, which carries them).
"""

from __future__ import annotations

import dataclasses

import gin
import pytest
from commands import REPO
from flaxformer_gin_commands import CONFIGS, FLAXFORMER_GIN, all_files, argv, gin_files, required
from flaxformer_gin_states import STATES, docs_page
from gin_walk import check_outcome, refusal_of
from t5x_gin_commands import T5X_GIN, overrides

from t5forge.gin_config.gin_registry import config_from_gin
from t5forge.gin_config.t5x_compat.flaxformer_names import LONGT5 as LONGT5_FEATURE
from t5forge.gin_config.t5x_compat.flaxformer_names import MOE as MOE_FEATURE
from t5forge.gin_config.t5x_compat.translate import MissingModelFeature, missing_parameters
from t5forge.models.presets import get_config

pytestmark = pytest.mark.skipif(
    not FLAXFORMER_GIN.is_dir(), reason=f"Flaxformer's gin files not found at {FLAXFORMER_GIN}"
)


def test_the_table_has_a_row_for_every_file():
    assert list(STATES) == all_files()
    assert len(STATES) == 80


def test_the_docs_page_is_the_generated_one():
    page = (REPO / "docs" / "flaxformer-gin.md").read_text()
    assert page == docs_page(), (
        "run: python tests/t5x_files/flaxformer_gin_states.py > docs/flaxformer-gin.md"
    )


@pytest.mark.parametrize("path", list(STATES))
def test_file_parses_or_is_refused_in_one_line(path, tmp_path, capsys):
    command, args = argv(path, tmp_path)
    check_outcome(path, command, args, STATES[path], capsys)


def model_fields(path: str, tmp_path, *flags: str) -> dict:
    """The T5Config fields a model file's bindings set at its own sizes (with T5X's
    pretrain run file): the built config's, or the refusal's where a feature is missing."""
    _, files = gin_files(path)
    args = [
        f"--gin_search_paths={FLAXFORMER_GIN},{T5X_GIN}",
        *(f"--gin_file={f}" for f in files),
        *overrides(tmp_path),
        *required(path),
        *flags,
    ]
    gin.clear_config()
    try:
        error = refusal_of("train", args)
        if isinstance(error, MissingModelFeature):
            return error.fields
        assert error is None, error
        # refusal_of clears the config it checked: parse again to build the config.
        from t5forge.cli import run_flags

        run_flags.configure_run(args, "", "train")
        return dataclasses.asdict(config_from_gin())
    finally:
        gin.clear_config()


PRESETS = {  # Flaxformer's model file -> t5forge's preset of the same model
    **{f"t5_{size}": f"t5_1_0/{size}" for size in ("small", "base", "large", "3B", "11B")},
    **{
        f"{family}_{size}": f"{family.replace('t5_1_1', 't5_1_1')}/{size}"
        for family in ("t5_1_1", "mt5", "byt5")
        for size in ("small", "base", "large", "xl", "xxl")
    },
}


@pytest.mark.parametrize("stem", sorted(PRESETS))
def test_each_t5_model_file_builds_the_published_model(stem, tmp_path):
    fields = model_fields(f"{CONFIGS}/t5/models/{stem}.gin", tmp_path)
    assert fields == dataclasses.asdict(get_config(PRESETS[stem]))


def test_the_architectures_own_values_reach_the_config(tmp_path):
    fields = model_fields(f"{CONFIGS}/t5/models/t5_small.gin", tmp_path)
    assert fields["logits_via_embedding"] and fields["mlp_activations"] == ("relu",)
    assert fields["relative_attention_num_buckets"] == 32 and fields["dtype"] == "bfloat16"


@pytest.mark.parametrize(
    "path, flag, field",
    [
        (f"{CONFIGS}/t5/models/t5_1_1_small.gin", "dense.MlpBlock.dtype='float32'", "dtype"),
        (  # LongT5's encoder biases and the decoder's share T5Config's one pair of fields
            f"{CONFIGS}/longt5/models/longt5_1_1_base.gin",
            "relative_position_biases_general.RelativePositionBiasesGeneral.num_buckets=64",
            "relative_attention_num_buckets",
        ),
    ],
)
def test_two_layers_that_disagree_on_one_field_are_refused_in_one_line(path, flag, field, tmp_path):
    _, files = gin_files(path)
    error = refusal_of(
        "train",
        [
            f"--gin_search_paths={FLAXFORMER_GIN},{T5X_GIN}",
            *(f"--gin_file={f}" for f in files),
            *overrides(tmp_path),
            f"--gin.{flag}",
        ],
    )
    assert error is not None and "\n" not in str(error)
    assert f"T5Config.{field}" in str(error) and f"has one {field}" in str(error)


LONGT5 = f"{CONFIGS}/longt5/models"


@pytest.mark.parametrize(
    "stem, attention, block",
    [
        ("longt5_1_1_base", "local", None),
        ("longt5_1_1_transient_global_base", "transient_global", 16),
    ],
)
def test_longt5_files_set_the_encoder_attention(stem, attention, block, tmp_path):
    fields = model_fields(f"{LONGT5}/{stem}.gin", tmp_path)
    assert fields["encoder_attention"] == attention and fields["local_radius"] == 127
    if block is not None:  # a local file leaves it unset
        assert fields["global_block_size"] == block
    assert (fields["emb_dim"], fields["num_encoder_layers"], fields["mlp_dim"]) == (768, 12, 2048)


MOE = f"{CONFIGS}/moe/models"


def _feature_model_files():
    """Every LongT5 and MoE model file, to run where t5forge builds its feature."""
    for path, feature in [
        *((p, LONGT5_FEATURE) for p in all_files() if p.startswith(f"{LONGT5}/")),
        *((p, MOE_FEATURE) for p in all_files() if p.startswith(f"{MOE}/")),
    ]:
        missing = missing_parameters(feature)
        reason = f"needs {feature} ({', '.join(missing)})"
        yield pytest.param(path, marks=pytest.mark.skipif(bool(missing), reason=reason))


@pytest.mark.parametrize("path", list(_feature_model_files()))
def test_each_longt5_and_moe_model_file_builds_its_config(path, tmp_path):
    """At its own sizes, as the T5 files build their presets (and T5Config validates it)."""
    fields = model_fields(path, tmp_path)
    stem = path.rsplit("/", 1)[-1].removesuffix(".gin")
    if "longt5" in stem:  # LongT5 1.1 has T5 1.1's sizes (mLongT5 mT5's, umT5's vocabulary)
        preset = get_config(f"{'mt5' if stem.startswith('m') else 't5_1_1'}/{stem.split('_')[-1]}")
        sizes = ("emb_dim", "num_heads", "num_encoder_layers", "head_dim", "mlp_dim")
        assert {k: fields[k] for k in sizes} == {k: getattr(preset, k) for k in sizes}
        assert fields["encoder_attention"] in ("local", "transient_global")
    else:
        assert fields["num_experts"] > 0
        assert 0 < fields["num_sparse_encoder_layers"] <= fields["num_encoder_layers"]


def test_tokens_choose_sets_the_sparse_layers(tmp_path):
    fields = model_fields(f"{MOE}/tokens_choose_base.gin", tmp_path)
    assert {k: fields[k] for k in fields if k in EXPECTED_TOKENS_CHOOSE} == EXPECTED_TOKENS_CHOOSE


EXPECTED_TOKENS_CHOOSE = {
    "num_experts": 64,
    "num_selected_experts": 2,
    "expert_mlp_dim": 2048,
    "num_sparse_encoder_layers": 3,
    "num_sparse_decoder_layers": 3,
    "encoder_sparse_layout": "mixed",
    "decoder_sparse_layout": "mixed",
    "encoder_router": "tokens_choose",
    "decoder_router": "tokens_choose",
    "encoder_batch_prioritized_routing": True,
    "decoder_batch_prioritized_routing": False,
    "train_capacity_factor": 1.25,
    "eval_capacity_factor": 2.0,
    "expert_group_size": 4096,
    "router_jitter_noise": 0.0,
    "aux_loss_factor": 0.01,
    "expert_dropout_rate": 0.0,
    "router_z_loss_factor": 0.0,
}


def test_experts_choose_routes_the_encoder_by_experts(tmp_path):
    fields = model_fields(f"{MOE}/experts_choose_base.gin", tmp_path)
    assert (fields["encoder_router"], fields["decoder_router"]) == (
        "experts_choose",
        "tokens_choose",
    )
    assert fields["num_sparse_encoder_layers"] == 6


def test_st_moe_adds_the_dense_mlp_and_router_z_loss(tmp_path):
    fields = model_fields(f"{MOE}/st_moe_base.gin", tmp_path)
    assert fields["sparse_extra_mlp"] and fields["router_z_loss_factor"] == 1e-4
    assert fields["num_experts"] == 16 and not fields["encoder_batch_prioritized_routing"]


def test_switch_is_top_1_with_relu_experts_and_tied_logits(tmp_path):
    fields = model_fields(f"{MOE}/switch_base.gin", tmp_path)
    assert (fields["num_selected_experts"], fields["num_experts"]) == (1, 128)
    assert fields["mlp_activations"] == ("relu",) and fields["logits_via_embedding"]
