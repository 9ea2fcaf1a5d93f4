"""Parity with Hugging Face `transformers` LongT5 (PyTorch), both directions, and LongT5's
T5X/Flaxformer names.

Tiny random-weight LongT5 models of both encoder attentions with local_radius=3 (blocks of 4)
and global_block_size=2 over encoder inputs of 11 positions, so every edge runs: a last block
padded by one position, a first and last block with a missing neighbour, rows padded to
different lengths (whole padded blocks among them), orphan tokens (odd valid lengths: the last
token joins the previous global block), and a row of one token, shorter than one global block.
The norms' weights are random too, so a norm read from the wrong place shows.
"""

import dataclasses

import jax
import numpy as np
import pytest
from local_hub import block_network, cache_repo, commit_sha

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import t5forge  # noqa: E402
from t5forge.errors import ConfigError  # noqa: E402
from t5forge.interop import huggingface as hf  # noqa: E402
from t5forge.interop.t5x import infer_config, load_t5x_checkpoint  # noqa: E402
from t5forge.models.model import build_model  # noqa: E402
from t5forge.models.param_names import named_leaves  # noqa: E402
from tests.interop.test_huggingface import (  # noqa: E402
    _hf_generate,
    _hf_logits,
    assert_beams_match_up_to_t5x_rules,
)

VOCAB = 16
# (T5Config.encoder_attention, HF fields, seed): two feed-forward kinds, scaled and not.
LAYOUTS = {
    "local": (
        "local",
        dict(encoder_attention_type="local", feed_forward_proj="relu"),
        0,
    ),
    "transient_global": (
        "transient_global",
        dict(
            encoder_attention_type="transient-global",
            feed_forward_proj="gated-gelu",
            tie_word_embeddings=False,
        ),
        1,
    ),
}
# Right-padded encoder inputs (EOS=1 last): 6, 3, 11 and 1 valid positions of 11.
ENCODER_INPUTS = np.array(
    [
        [5, 9, 3, 12, 7, 1, 0, 0, 0, 0, 0],
        [14, 3, 1, 0, 0, 0, 0, 0, 0, 0, 0],
        [8, 11, 15, 6, 4, 9, 13, 10, 2, 3, 1],
        [1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
    ],
    np.int32,
)
TARGETS = np.array([[6, 13, 1, 0, 0], [10, 15, 12, 11, 1], [3, 1, 0, 0, 0], [7, 1, 0, 0, 0]])


def _hf_config(layout: str):
    return transformers.LongT5Config(
        vocab_size=VOCAB,
        d_model=12,
        d_kv=4,
        d_ff=20,
        num_layers=2,
        num_decoder_layers=3,
        num_heads=3,
        local_radius=3,
        global_block_size=2,
        relative_attention_num_buckets=8,
        relative_attention_max_distance=20,
        dropout_rate=0.0,
        decoder_start_token_id=0,
        **LAYOUTS[layout][1],
    )


def _random_hf_model(layout: str):
    torch.manual_seed(LAYOUTS[layout][2])
    model = transformers.LongT5ForConditionalGeneration(_hf_config(layout)).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0.0, 0.5)
    return model


@pytest.fixture(scope="module", params=list(LAYOUTS))
def converted(request, tmp_path_factory):
    """(layout, HF model, its saved directory, t5forge Model loaded from that directory)."""
    model = _random_hf_model(request.param)
    path = tmp_path_factory.mktemp(request.param)
    model.save_pretrained(path)
    return request.param, model, path, t5forge.load(path)


def _assert_close_where_valid(ours, theirs):
    valid = TARGETS > 0  # padded decoder positions compute nothing anyone reads
    np.testing.assert_allclose(ours[valid], theirs[valid], atol=1e-4, rtol=0)


def _decoder_inputs(targets):
    return np.pad(targets, ((0, 0), (1, 0)))[:, :-1].astype(np.int32)


def test_config_reads_the_encoder_attention(converted):
    layout, _, _, forge = converted
    config = forge.config
    assert config.encoder_attention == LAYOUTS[layout][0]
    assert (config.local_radius, config.global_block_size) == (3, 2)
    assert config.logits_scaled == (layout == "local")
    assert hf.config_from_hf(hf.config_to_hf(config)) == config


def test_imported_logits_match_transformers(converted):
    _, model, _, forge = converted
    expected = _hf_logits(model, ENCODER_INPUTS, TARGETS)
    _assert_close_where_valid(forge.logits(ENCODER_INPUTS, _decoder_inputs(TARGETS)), expected)


def test_greedy_matches_transformers_generate(converted):
    _, model, _, forge = converted
    expected = _hf_generate(model, ENCODER_INPUTS, 9, num_beams=1)
    np.testing.assert_array_equal(forge.generate(ENCODER_INPUTS, max_length=9), expected)


def test_beam_matches_transformers_generate_up_to_t5x_finishing_rules(converted):
    _, model, _, forge = converted
    assert_beams_match_up_to_t5x_rules(model, forge, ENCODER_INPUTS, max_length=9, beams=3)


def _random_params(config, seed: int):
    """Fresh t5forge params with every leaf random (norms and biases included)."""
    params = jax.device_get(build_model(config).init_params(jax.random.PRNGKey(seed)))
    leaves, tree = jax.tree.flatten(params)
    rng = np.random.default_rng(seed)
    return jax.tree.unflatten(
        tree, [rng.normal(0.0, 0.5, np.shape(x)).astype(np.float32) for x in leaves]
    )


@pytest.mark.slow
def test_export_read_back_by_transformers(converted, tmp_path):
    """t5forge's weights, exported, give transformers t5forge's logits; the transient-global
    layout exports an untied head."""
    layout, _, _, forge = converted
    config = dataclasses.replace(forge.config, logits_via_embedding=layout == "local")
    params = _random_params(config, seed=7)
    hf.save_hf_dir(params, config, tmp_path)
    exported, info = transformers.LongT5ForConditionalGeneration.from_pretrained(
        tmp_path, output_loading_info=True
    )
    assert info["missing_keys"] == set() and info["unexpected_keys"] == set()
    assert exported.config.encoder_attention_type == LAYOUTS[layout][1]["encoder_attention_type"]
    expected = _hf_logits(exported.eval(), ENCODER_INPUTS, TARGETS)
    again = t5forge.load(tmp_path)
    assert again.config == config
    _assert_close_where_valid(again.logits(ENCODER_INPUTS, _decoder_inputs(TARGETS)), expected)
    for name, value in hf.params_to_hf_state_dict(params, config).items():
        np.testing.assert_array_equal(exported.state_dict()[name].numpy(), value)


@pytest.mark.slow
def test_t5x_checkpoint_holds_flaxformer_names_and_the_same_model(converted, tmp_path):
    """convert --to t5x writes Flaxformer's LongT5 names; read back (with the config, which
    T5X checkpoints do not carry) it computes transformers' logits."""
    layout, model, path, forge = converted
    written = t5forge.convert(path, tmp_path / "t5x", from_="hf", to="t5x").path
    params, _, _ = load_t5x_checkpoint(written)
    names = set(named_leaves(params))
    global_norm = "encoder/layers_1/attention/T5LayerNorm_0/scale"
    side = "encoder/side_relpos_bias/rel_embedding"
    assert "encoder/relpos_bias/rel_embedding" in names
    assert (global_norm in names, side in names) == (layout == "transient_global",) * 2
    inferred = infer_config(params).encoder_attention
    assert inferred == ("transient_global" if layout == "transient_global" else "full")
    back = t5forge.load(written, config=forge.config)
    expected = _hf_logits(model, ENCODER_INPUTS, TARGETS)
    _assert_close_where_valid(back.logits(ENCODER_INPUTS, _decoder_inputs(TARGETS)), expected)
    t5forge.convert(written, tmp_path / "hf", from_="t5x", to="hf", config=forge.config)
    again = transformers.LongT5ForConditionalGeneration.from_pretrained(tmp_path / "hf").eval()
    np.testing.assert_array_equal(
        _hf_logits(again, ENCODER_INPUTS, TARGETS), _hf_logits(model, ENCODER_INPUTS, TARGETS)
    )


def test_a_hub_id_in_the_cache_loads(converted, tmp_path, monkeypatch):
    layout, model, path, _ = converted
    repo = f"google/long-t5-{layout}-tiny"
    cache_repo(tmp_path / "hub", repo, path, commit_sha(layout))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    block_network(monkeypatch)
    forge = t5forge.load(repo)
    expected = _hf_logits(model, ENCODER_INPUTS, TARGETS)
    _assert_close_where_valid(forge.logits(ENCODER_INPUTS, _decoder_inputs(TARGETS)), expected)


def test_an_unknown_encoder_attention_type_is_one_line():
    fields = {**_hf_config("local").to_dict(), "encoder_attention_type": "sparse"}
    with pytest.raises(ConfigError, match="encoder_attention_type 'sparse' is not supported"):
        hf.config_from_hf(fields)
