"""The Gemma switches of T5Config (T5Gemma's network) on every path t5forge runs.

Parity of the numbers with transformers is tests/interop/test_hf_t5gemma.py; here the
network agrees with itself where it computes one thing two ways: packed and separate
sequences (RoPE positions per segment, windows), scanned and per-layer stacks, remat and not,
cached decoding and the teacher-forced pass. A 2-position window on 9-token inputs makes the
windows bite; the refusals are one line each.
"""

import dataclasses

import jax
import numpy as np
import pytest
from packed_rows import assert_packed_rows_match_separate

from t5forge.errors import ConfigError
from t5forge.models.configs import SLIDING_ATTENTION, T5Config
from t5forge.models.model import build_model
from t5forge.models.param_layout import stack_layers
from t5forge.models.presets import get_config

SLIDING, FULL = SLIDING_ATTENTION, "full_attention"
GEMMA = dict(
    dtype="float32",
    vocab_size=40,
    head_dim=4,
    num_kv_heads=2,
    rope_theta=50.0,
    query_pre_attn_scalar=3.0,
    attn_logit_softcap=2.0,
    final_logit_softcap=3.0,
    encoder_layer_types=(SLIDING, FULL),
    decoder_layer_types=(SLIDING, FULL),
    sliding_window=2,
    zero_centered_norm=True,
    post_norms=True,
    separate_embeddings=True,
    scale_embeddings=True,
    logits_via_embedding=True,
    scale_logits=False,
    decoder_start_token_id=2,
    encoder_overrides={"emb_dim": 12, "num_heads": 2, "num_kv_heads": 1},
)


def _gemma(**overrides) -> T5Config:
    return get_config("t5_1_1/tiny", **{**GEMMA, **overrides})


def _batch(rng, inputs: int, targets: int) -> dict:
    encoder = rng.randint(3, 40, (1, inputs)).astype(np.int32)
    target = rng.randint(3, 40, (1, targets)).astype(np.int32)
    decoder = np.concatenate([np.zeros((1, 1), np.int32), target[:, :-1]], axis=1)
    return {
        "encoder_input_tokens": encoder,
        "decoder_input_tokens": decoder,
        "decoder_target_tokens": target,
    }


@pytest.fixture(scope="module")
def gemma():
    model = build_model(_gemma())
    return model, jax.device_get(model.init_params(jax.random.PRNGKey(0)))


def test_encoder_keeps_its_own_widths(gemma):
    model, params = gemma
    assert params["encoder"]["token_embedder"]["embedding"].shape == (40, 12)
    assert params["decoder"]["token_embedder"]["embedding"].shape == (40, 8)
    cross = params["decoder"]["layers_0"]["encoder_decoder_attention"]
    assert cross["key"]["kernel"].shape == (12, 2 * 4)  # the encoder's width, the kv heads
    assert "relpos_bias" not in params["encoder"] and "token_embedder" not in params


# T5Gemma 2's switches on top: QK-norm, a local RoPE base, the split encoder window, merged
# decoder attention, the end-of-image token's own embedding; one shared embedding.
GEMMA_3 = dict(
    qk_norm=True,
    rope_local_theta=10.0,
    encoder_window="split",
    merged_attention=True,
    eoi_token_id=7,
    separate_embeddings=False,
    encoder_overrides={"num_heads": 2, "num_kv_heads": 1},
)


@pytest.mark.parametrize("family", [{}, GEMMA_3], ids=["t5gemma", "t5gemma2"])
def test_packed_batch_matches_segments_run_separately(family):
    """RoPE counts positions from 0 in each segment and windows stay inside it."""
    model = build_model(_gemma(**family))
    params = jax.device_get(model.init_params(jax.random.PRNGKey(0)))
    rng = np.random.RandomState(3)
    singles = [_batch(rng, n, m) for n, m in ((4, 3), (5, 6))]
    assert_packed_rows_match_separate(model, params, singles)


def test_scanned_stack_computes_the_per_layer_one():
    config = _gemma(encoder_layer_types=(SLIDING, SLIDING), decoder_layer_types=(FULL, FULL))
    model = build_model(config)
    params = jax.device_get(model.init_params(jax.random.PRNGKey(1)))
    scanned_config = dataclasses.replace(config, scan_layers=True)
    scanned = build_model(scanned_config)
    batch = _batch(np.random.RandomState(1), 9, 7)
    np.testing.assert_allclose(
        scanned.logits(stack_layers(params, scanned_config), batch),
        model.logits(params, batch),
        atol=1e-5,
    )


def test_remat_gives_the_same_gradients(gemma):
    _, params = gemma
    batch = _batch(np.random.RandomState(2), 9, 7)

    def gradients(config):
        model = build_model(config)
        return jax.grad(lambda p: model.loss_fn(p, batch)[0])(params)

    plain, remat = gradients(_gemma()), gradients(_gemma(remat_policy="full"))
    for a, b in zip(jax.tree.leaves(plain), jax.tree.leaves(remat), strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5)


@pytest.mark.parametrize("family", [{}, GEMMA_3], ids=["t5gemma", "t5gemma2"])
def test_cached_decoding_agrees_with_the_teacher_forced_pass(family):
    """Greedy tokens (KV cache, windows past their width) are the forward pass's argmax."""
    model = build_model(_gemma(**family))
    params = jax.device_get(model.init_params(jax.random.PRNGKey(0)))
    batch = _batch(np.random.RandomState(4), 9, 8)
    tokens = np.asarray(model.predict_batch(params, batch, max_decode_length=8, method="greedy"))
    decoder = np.concatenate([np.zeros((1, 1), np.int32), tokens[:, :-1]], axis=1)
    valid = np.cumsum(tokens == 1, axis=1) - (tokens == 1) == 0  # up to EOS
    forced = {**batch, "decoder_input_tokens": decoder, "decoder_target_tokens": tokens + 0}
    forced["decoder_target_tokens"][~valid] = 0
    argmax = np.argmax(np.asarray(model.logits(params, forced)), axis=-1)
    np.testing.assert_array_equal(argmax[valid], tokens[valid])


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (dict(num_kv_heads=3), "num_kv_heads must be a positive divisor of num_heads"),
        (dict(sliding_window=None), "sliding_window must be a positive integer"),
        (dict(scan_layers=True), "scan_layers scans one layer for the whole stack"),
        (dict(decoder_layer_types=(FULL,)), "decoder_layer_types names 1 layers"),
        (dict(head_dim=3), "head_dim must be even"),
        (dict(encoder_overrides={"vocab_size": 9}), "the encoder may differ only in"),
        (dict(separate_embeddings=False), "emb_dim needs separate_embeddings"),
    ],
)
def test_bad_switches_are_one_line(overrides, message):
    with pytest.raises(ConfigError, match=message) as caught:
        _gemma(**overrides)
    assert "\n" not in str(caught.value)


def test_prefix_lm_decoding_agrees_with_the_teacher_forced_pass():
    """A decoder-only network with the switches: the prefilled prompt (bidirectional inside
    its windows) and cached steps give the forward pass's argmax."""
    config = _gemma(
        architecture="decoder_only",
        num_encoder_layers=0,
        encoder_layer_types=(),
        encoder_overrides=(),
    )
    model = build_model(config)
    params = jax.device_get(model.init_params(jax.random.PRNGKey(5)))
    length, prompt = 10, np.array([7, 8, 9, 11], np.int32)
    decoder = np.zeros((1, length), np.int32)
    decoder[0, 1:5] = prompt
    causal = np.zeros((1, length), np.int32)
    causal[0, :5] = 1
    batch = {
        "decoder_input_tokens": decoder,
        "decoder_causal_attention": causal,
        "decoder_target_tokens": np.zeros_like(decoder),
    }
    generated = np.asarray(model.predict_batch(params, batch))[0]
    generated = generated[generated > 0]
    full = np.zeros((1, length), np.int32)
    full[0, : 5 + len(generated)] = np.concatenate([[0], prompt, generated])[:length]
    logits = model.network.apply(
        {"params": params}, full, np.ones_like(full), decoder_causal_attention=causal
    )
    argmax = np.asarray(logits)[0].argmax(-1)
    np.testing.assert_array_equal(generated, argmax[4 : 4 + len(generated)])
