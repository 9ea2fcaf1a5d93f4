"""jax.nn.dot_product_attention equals T5's written-out attention, and the kernel choice.

The written-out ('explicit') formulation is what t5forge computed before attention went through
`jax.nn.dot_product_attention`; both must give the same values and gradients for every kind of
attention T5 has, with the masks the network itself builds (padding, causal, packing, prefix).
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from t5forge.errors import ConfigError
from t5forge.models.attention import (
    Platform,
    attend,
    cached_attention,
    choose_implementation,
    explicit_attention,
    slot_attention,
)
from t5forge.models.layers import (
    decoder_self_mask,
    mask_to_bias,
    pairwise_mask,
    relative_position_bucket,
)
from t5forge.models.model import build_model
from t5forge.models.presets import get_config

HEADS, HEAD_DIM, BATCH = 3, 4, 2
CPU = Platform("cpu")
H100 = Platform("gpu", 9.0)


def _relpos(bidirectional, query_positions, key_positions):
    """A T5 relative position bias [1, H, q, k] from a random table, large enough to matter."""
    table = 3.0 * jax.random.normal(jax.random.PRNGKey(1), (HEADS, 32))
    buckets = relative_position_bucket(
        key_positions[None, :] - query_positions[:, None], bidirectional, 32, 128
    )
    return table[:, buckets][None]


def _tokens(lengths, total):
    """[B, total] ids, row b valid for lengths[b] positions then padding."""
    return np.array([[7] * n + [0] * (total - n) for n in lengths], np.int32)


def _segments(splits, total):
    """[B, total] packing segment ids: row b has segments of the given sizes, then 0s."""
    rows = []
    for sizes in splits:
        row = [i + 1 for i, n in enumerate(sizes) for _ in range(n)]
        rows.append(row + [0] * (total - len(row)))
    return np.array(rows, np.int32)


def _encoder_self(packed):
    tokens = _tokens([8, 6], 8)
    mask = pairwise_mask(tokens > 0, tokens > 0)
    if packed:
        segments = _segments([[3, 5], [4, 2]], 8)
        mask = jnp.logical_and(mask, pairwise_mask(segments, segments, jnp.equal))
    positions = jnp.arange(8)
    return 8, 8, mask_to_bias(mask) + _relpos(True, positions, positions)


def _decoder_self(packed):
    valid = _tokens([6, 4], 6) > 0
    segments = _segments([[2, 4], [3, 1]], 6) if packed else None
    mask = decoder_self_mask(6, valid, segments)
    positions = jnp.arange(6)
    return 6, 6, mask_to_bias(mask) + _relpos(False, positions, positions)


def _prefix_lm(packed):
    valid = _tokens([6, 5], 6) > 0
    prefix = np.array([[1, 1, 1, 0, 0, 0], [1, 1, 0, 0, 0, 0]], np.int32)
    segments = _segments([[6], [3, 2]], 6) if packed else None
    mask = decoder_self_mask(6, valid, segments, prefix)
    positions = jnp.arange(6)
    return 6, 6, mask_to_bias(mask) + _relpos(False, positions, positions)


def _cross(packed):
    targets, inputs = _tokens([6, 3], 6), _tokens([8, 5], 8)
    mask = pairwise_mask(targets > 0, inputs > 0)
    if packed:
        mask = jnp.logical_and(
            mask,
            pairwise_mask(
                _segments([[2, 4], [1, 2]], 6), _segments([[5, 3], [2, 3]], 8), jnp.equal
            ),
        )
    return 6, 8, mask_to_bias(mask)


def _decode_step(packed):
    # One new position (index 4) over an 8-slot self-attention cache; packing does not apply.
    del packed
    index, slots = 4, jnp.arange(8)
    visible = (slots <= index)[None, None, None, :]
    return 1, 8, mask_to_bias(visible) + _relpos(False, jnp.array([index]), slots)


ATTENTION_KINDS = {
    "encoder_self": _encoder_self,
    "decoder_self": _decoder_self,
    "prefix_lm": _prefix_lm,
    "cross": _cross,
    "decode_step": _decode_step,
}


def _qkv(query_length, key_length, dtype=jnp.float32):
    keys = jax.random.split(jax.random.PRNGKey(2), 3)
    shapes = [(BATCH, HEADS, query_length, HEAD_DIM)] + [(BATCH, HEADS, key_length, HEAD_DIM)] * 2
    return [jax.random.normal(k, s).astype(dtype) for k, s in zip(keys, shapes)]


def _xla_attention(query, key, value, bias):
    return attend(query, key, value, bias, "xla", platform=CPU)


@functools.partial(jax.jit, static_argnums=0)
def _output_and_gradients(fn, query, key, value, bias, cotangent):
    """fn's output and the gradients of <output, cotangent> for query, key, value and bias."""
    output, pullback = jax.vjp(fn, query, key, value, bias)
    return output, pullback(cotangent)


@pytest.mark.parametrize("packed", [False, True], ids=["unpacked", "packed"])
@pytest.mark.parametrize("kind", ATTENTION_KINDS)
def test_xla_attention_equals_explicit_in_values_and_gradients(kind, packed):
    query_length, key_length, bias = ATTENTION_KINDS[kind](packed)
    query, key, value = _qkv(query_length, key_length)
    cotangent = jax.random.normal(jax.random.PRNGKey(3), (BATCH, query_length, HEADS, HEAD_DIM))
    ours, grads = _output_and_gradients(_xla_attention, query, key, value, bias, cotangent)
    reference, reference_grads = _output_and_gradients(
        explicit_attention, query, key, value, bias, cotangent
    )
    np.testing.assert_allclose(ours, reference, atol=2e-6, rtol=1e-5)
    for name, got, want in zip(("query", "key", "value", "bias"), grads, reference_grads):
        np.testing.assert_allclose(got, want, atol=2e-5, rtol=1e-4, err_msg=name)
    assert float(jnp.abs(reference_grads[3]).max()) > 0.0  # the bias gradient reaches relpos


def test_bfloat16_attention_keeps_float32_logits_in_both_formulations():
    query_length, key_length, bias = _encoder_self(packed=True)
    query, key, value = _qkv(query_length, key_length, jnp.bfloat16)
    ours = attend(query, key, value, bias, "xla", platform=CPU)
    reference = explicit_attention(query, key, value, bias)
    assert ours.dtype == reference.dtype == jnp.bfloat16
    # Only the bfloat16 rounding of the weights may differ between the two.
    np.testing.assert_allclose(np.float32(ours), np.float32(reference), atol=0.05)


def test_dropout_forces_the_explicit_formulation():
    query_length, key_length, bias = _decoder_self(packed=False)
    query, key, value = _qkv(query_length, key_length)
    keep = jax.random.bernoulli(jax.random.PRNGKey(4), 0.5, (BATCH, HEADS, 6, 6))

    def dropout(weights):
        return jnp.where(keep, weights * 2.0, 0.0)

    np.testing.assert_array_equal(
        attend(query, key, value, bias, "xla", dropout, platform=CPU),
        explicit_attention(query, key, value, bias, dropout),
    )


@pytest.mark.parametrize(
    "requested,platform,dtype,head_dim,lengths,chosen",
    [
        ("auto", CPU, jnp.bfloat16, 64, (512, 512), "explicit"),  # products.py's fast forms
        ("auto", CPU, jnp.float32, 64, (512, 512), "xla"),
        ("auto", Platform("tpu"), jnp.bfloat16, 64, (512, 512), "xla"),
        ("auto", H100, jnp.bfloat16, 64, (512, 114), "cudnn"),
        ("auto", H100, jnp.float16, 128, (114, 114), "cudnn"),
        ("auto", H100, jnp.float32, 64, (512, 512), "xla"),  # cuDNN attention has no float32
        ("auto", H100, jnp.bfloat16, 64, (1, 512), "xla"),  # a decoding step
        ("auto", H100, jnp.bfloat16, 64, (113, 512), "xla"),  # odd length with a bias
        ("auto", H100, jnp.bfloat16, 12, (512, 512), "xla"),  # head_dim not a multiple of 8
        ("auto", Platform("gpu", 8.0), jnp.bfloat16, 256, (512, 512), "xla"),  # 256 needs Hopper
        ("auto", H100, jnp.bfloat16, 256, (512, 512), "cudnn"),
        ("auto", Platform("gpu", 7.0), jnp.bfloat16, 64, (512, 512), "xla"),  # pre-Ampere
        ("auto", Platform("gpu"), jnp.bfloat16, 64, (512, 512), "xla"),  # a ROCm GPU
        ("cudnn", CPU, jnp.bfloat16, 64, (512, 512), "xla"),  # a GPU-trained config on a laptop
        ("cudnn", H100, jnp.bfloat16, 64, (1, 512), "xla"),
        ("cudnn", H100, jnp.bfloat16, 64, (512, 114), "cudnn"),
        ("xla", H100, jnp.bfloat16, 64, (512, 512), "xla"),
        ("explicit", H100, jnp.bfloat16, 64, (512, 512), "explicit"),
    ],
)
def test_implementation_choice(requested, platform, dtype, head_dim, lengths, chosen):
    assert choose_implementation(requested, platform, dtype, head_dim, *lengths) == chosen


def test_forced_cudnn_on_a_gpu_that_cannot_run_it_is_one_clear_error():
    with pytest.raises(
        ConfigError,
        match="'cudnn' cannot run here: cuDNN attention computes "
        "in bfloat16 or float16, not float32; use 'auto'",
    ):
        choose_implementation("cudnn", H100, jnp.float32, 64, 512, 512)


def test_unknown_implementation_is_a_config_error():
    with pytest.raises(ConfigError, match="attention_implementation must be one of"):
        get_config("t5_1_1/tiny", attention_implementation="flash")


def _models(preset, **overrides):
    """The same tiny network with the jax.nn kernel ('auto' is XLA on CPU) and written out."""
    configs = [
        get_config(
            preset,
            dtype="float32",
            vocab_size=64,
            head_dim=4,
            attention_implementation=impl,
            **overrides,
        )
        for impl in ("auto", "explicit")
    ]
    return [build_model(c) for c in configs]


def _assert_same_logits_and_gradients(models, params, batch):
    ours, reference = models
    np.testing.assert_allclose(
        ours.logits(params, batch), reference.logits(params, batch), atol=1e-5, rtol=1e-5
    )
    grads = [jax.jit(jax.grad(lambda p, m=m: m.loss_fn(p, batch)[0]))(params) for m in models]
    flat_ours, flat_reference = (jax.tree_util.tree_leaves_with_path(g) for g in grads)
    for (path, got), (_, want) in zip(flat_ours, flat_reference):
        np.testing.assert_allclose(
            got, want, atol=1e-5, rtol=1e-4, err_msg=jax.tree_util.keystr(path)
        )


def test_encoder_decoder_network_is_unchanged_by_the_kernel():
    models = _models("t5_1_1/tiny")
    params = models[0].init_params(jax.random.PRNGKey(5))
    rng = np.random.RandomState(5)
    batch = {
        "encoder_input_tokens": rng.randint(2, 64, (2, 8)).astype(np.int32),
        "decoder_target_tokens": rng.randint(2, 64, (2, 6)).astype(np.int32),
    }
    batch["encoder_input_tokens"][1, 6:] = 0
    batch["decoder_target_tokens"][1, 4:] = 0
    # Packed and padded: the attention layers' own tests cover unpacked masks.
    batch["encoder_segment_ids"] = _segments([[3, 5], [4, 2]], 8)
    batch["decoder_segment_ids"] = _segments([[2, 4], [3, 1]], 6)
    batch["decoder_input_tokens"] = np.concatenate(
        [np.zeros((2, 1), np.int32), batch["decoder_target_tokens"][:, :-1]], axis=1
    )
    _assert_same_logits_and_gradients(models, params, batch)


def test_prefix_lm_network_is_unchanged_by_the_kernel():
    models = _models("decoder_only/tiny")
    params = models[0].init_params(jax.random.PRNGKey(6))
    targets = np.random.RandomState(6).randint(2, 64, (2, 8)).astype(np.int32)
    targets[1, 6:] = 0
    batch = {
        "decoder_target_tokens": targets,
        "decoder_input_tokens": np.concatenate(
            [np.zeros((2, 1), np.int32), targets[:, :-1]], axis=1
        ),
        "decoder_causal_attention": np.array([[1] * 3 + [0] * 5, [1] * 2 + [0] * 6], np.int32),
        "decoder_segment_ids": _segments([[8], [4, 2]], 8),
    }
    _assert_same_logits_and_gradients(models, params, batch)


def _stepwise_logits(model, params, batch, length):
    """Logits of each cached decoding step, teacher-forced with the batch's decoder inputs."""
    _, cache, tokens_to_logits = model.decoding_state(params, batch, length)
    step_fn = jax.jit(tokens_to_logits)
    outputs = []
    for step in range(length):
        tokens = jnp.asarray(batch["decoder_input_tokens"][:, step : step + 1])
        logits, cache = step_fn(tokens, cache, jnp.int32(step))
        outputs.append(logits)
    return np.stack(outputs, axis=1)


def test_cached_decoding_is_unchanged_by_the_kernel():
    models = _models("t5_1_1/tiny")
    params = models[0].init_params(jax.random.PRNGKey(7))
    rng = np.random.RandomState(7)
    inputs = rng.randint(2, 64, (2, 8)).astype(np.int32)
    inputs[1, 5:] = 0
    batch = {
        "encoder_input_tokens": inputs,
        "decoder_input_tokens": np.concatenate(
            [np.zeros((2, 1), np.int32), rng.randint(2, 64, (2, 5)).astype(np.int32)], 1
        ),
    }
    ours, reference = (_stepwise_logits(m, params, batch, 6) for m in models)
    np.testing.assert_allclose(ours, reference, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("decodes", [1, 4])
def test_cached_attention_equals_explicit_for_each_decode(decodes):
    # A decoding step: `decodes` queries per input over that input's cache, with padding.
    keys = jax.random.split(jax.random.PRNGKey(3), 3)
    query = jax.random.normal(keys[0], (BATCH, HEADS, decodes, HEAD_DIM))
    key = jax.random.normal(keys[1], (BATCH, HEADS, 6, HEAD_DIM))
    value = jax.random.normal(keys[2], (BATCH, HEADS, 6, HEAD_DIM))
    bias = mask_to_bias(jnp.asarray(_tokens([6, 4], 6) > 0)[:, None, None, :])
    got = cached_attention(query, key, value, bias)
    assert got.shape == (BATCH, decodes, HEADS, HEAD_DIM)
    for j in range(decodes):  # each decode alone, as if it had its own copy of the cache
        alone = explicit_attention(query[:, :, j : j + 1], key, value, bias)
        np.testing.assert_allclose(got[:, j], alone[:, 0], atol=1e-6, rtol=0)


def test_slot_attention_reads_each_position_from_the_row_that_wrote_it():
    # Beam search's step: 3 decodes per input, each reading position j from the row of its
    # group named by a lineage, over caches that were never reordered. It must equal plain
    # attention over a cache assembled position by position from those rows.
    slots, length = 3, 5
    keys = jax.random.split(jax.random.PRNGKey(4), 4)
    query = jax.random.normal(keys[0], (BATCH, HEADS, slots, HEAD_DIM))
    key = jax.random.normal(keys[1], (BATCH * slots, HEADS, length, HEAD_DIM))
    value = jax.random.normal(keys[2], (BATCH * slots, HEADS, length, HEAD_DIM))
    lineage = jax.random.randint(keys[3], (BATCH, slots, length), 0, slots)
    relpos = _relpos(False, jnp.array([length - 1]), jnp.arange(length))  # [1, H, 1, L]
    written_by = lineage[:, None] == jnp.arange(slots)[None, :, None, None]  # [G, S, R, L]
    bias = relpos[:, None] + mask_to_bias(written_by)[:, :, None]
    got = slot_attention(query, key, value, bias)
    assert got.shape == (BATCH, slots, HEADS, HEAD_DIM)
    positions = jnp.arange(length)
    for g in range(BATCH):
        for r in range(slots):
            rows = g * slots + lineage[g, r]
            assembled = (key[rows, :, positions], value[rows, :, positions])  # [L, H, D]
            alone = explicit_attention(
                query[g : g + 1, :, r : r + 1],
                *(x.transpose(1, 0, 2)[None] for x in assembled),
                relpos,
            )
            np.testing.assert_allclose(got[g, r], alone[0, 0], atol=1e-5, rtol=0)
