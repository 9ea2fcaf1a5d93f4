"""The compiled decode attention equals XLA's formulation (attention.slot_attention and
cached_attention with the kernel off): float32 and bfloat16, odd lengths, one input, broadcast
biases, beam lineage masks, a query that sees nothing; beam search decodes the same tokens
through it; bad operands are one clear error. Each equality runs every build of the kernel this
CPU has (16 lanes: AVX-512, 8: AVX2, 4: baseline), whichever it would pick. Without the
extension these tests skip."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from t5forge.api import Model
from t5forge.errors import ConfigError
from t5forge.models import attention, native_attention, native_products
from t5forge.models.layers import MASK_BIAS
from t5forge.models.model import build_model
from t5forge.models.presets import get_config

needs_extension = pytest.mark.skipif(
    not native_products.available(),
    reason="t5forge_kernels is off: not built (make install builds it where a C++ compiler is) "
    "or T5FORGE_NATIVE_PRODUCTS=0",
)

TOLERANCE = {jnp.float32: 1e-5, jnp.bfloat16: 1e-2}


@pytest.fixture(params=[16, 8, 4], ids=lambda lanes: f"{lanes}_lanes")
def lanes(request):
    """The kernel's build of this many lanes, for the test (skipped where the CPU lacks it)."""
    kernels = pytest.importorskip("t5forge_kernels")
    try:
        previous = kernels.set_decode_attention_lanes(request.param)
    except ValueError as error:
        pytest.skip(str(error))
    yield request.param
    kernels.set_decode_attention_lanes(previous)


def xla_and_kernel(monkeypatch, attend, *operands):
    """`attend` jitted with the kernel off (XLA's formulation), then on."""
    with monkeypatch.context() as patched:
        patched.setattr(native_attention, "runs_here", lambda *_args, **_kw: False)
        expected = jax.jit(lambda *args: attend(*args))(*operands)
    actual = jax.jit(lambda *args: attend(*args))(*operands)
    return np.asarray(expected, np.float32), np.asarray(actual, np.float32)


def slot_operands(rng, dtype, groups, slots, heads, queries, length, head_dim, written):
    """Beam-search-like operands: each decode sees, at each written position, the one row
    its lineage names; relative position bias per head."""
    query = rng.standard_normal((groups, heads, queries, head_dim))
    key = rng.standard_normal((groups * slots, heads, length, head_dim))
    value = rng.standard_normal((groups * slots, heads, length, head_dim))
    lineage = rng.integers(0, slots, (groups, 1, queries, length))
    written_by = np.where(lineage == np.arange(slots)[None, :, None, None], 0.0, MASK_BIAS)
    causal = np.where(np.arange(length) < written, 0.0, MASK_BIAS)
    relative = rng.standard_normal((1, 1, heads, 1, length))
    bias = relative + written_by[:, :, None] + causal
    return [jnp.asarray(x, dtype) for x in (query, key, value, bias)]


@needs_extension
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
@pytest.mark.parametrize(
    ("groups", "slots", "heads", "queries", "length", "head_dim", "written"),
    [
        (8, 4, 6, 4, 64, 64, 41),
        (1, 3, 2, 3, 7, 16, 7),
        (3, 2, 5, 1, 13, 48, 1),
        (2, 4, 1, 4, 9, 80, 5),
    ],
)
def test_slot_attention_equals_xla(
    monkeypatch, lanes, dtype, groups, slots, heads, queries, length, head_dim, written
):
    rng = np.random.default_rng(groups * 100 + length)
    operands = slot_operands(rng, dtype, groups, slots, heads, queries, length, head_dim, written)
    expected, actual = xla_and_kernel(monkeypatch, attention.slot_attention, *operands)
    np.testing.assert_allclose(actual, expected, rtol=TOLERANCE[dtype], atol=TOLERANCE[dtype])


@needs_extension
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_cached_attention_of_several_decodes_per_input_equals_xla(monkeypatch, lanes, dtype):
    """Cross-attention under beam search: 4 decodes of each input over its encoder memory,
    each input padded to its own length, the bias broadcast over heads and decodes."""
    rng = np.random.default_rng(7)
    query = jnp.asarray(rng.standard_normal((3, 5, 4, 32)), dtype)
    key, value = (jnp.asarray(rng.standard_normal((3, 5, 11, 32)), dtype) for _ in range(2))
    lengths = np.array([11, 5, 1])
    bias = jnp.asarray(np.where(np.arange(11) < lengths[:, None], 0.0, MASK_BIAS)[:, None, None])
    expected, actual = xla_and_kernel(
        monkeypatch, attention.cached_attention, query, key, value, bias
    )
    np.testing.assert_allclose(actual, expected, rtol=TOLERANCE[dtype], atol=TOLERANCE[dtype])


@needs_extension
def test_a_query_that_sees_nothing_gets_xlas_uniform_softmax(monkeypatch, lanes):
    """A row whose every position is masked (an empty slot) is not NaN: XLA's softmax of
    equal logits, the mean of the values, as the formulation it replaces gives."""
    rng = np.random.default_rng(3)
    query, key, value, bias = slot_operands(rng, jnp.float32, 2, 2, 3, 2, 6, 16, 4)
    bias = bias.at[1].set(MASK_BIAS)
    expected, actual = xla_and_kernel(
        monkeypatch, attention.slot_attention, query, key, value, bias
    )
    assert np.isfinite(actual).all()
    np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-5)


@needs_extension
def test_one_query_over_one_row_stays_with_xla_below_a_big_cache():
    """Greedy steps at small batches and the server's rows keep XLA's dots (as fast there:
    native_attention.runs_here); beams, slots, and big greedy batches take the kernel."""
    one = jnp.zeros((2, 3, 1, 16))
    rows = jnp.zeros((2, 3, 5, 16))
    assert not native_attention.runs_here(one, rows, rows)
    assert native_attention.runs_here(one, rows, rows, slots=2)
    assert native_attention.runs_here(jnp.zeros((2, 3, 4, 16)), rows, rows)
    # Gemma's logit soft-capping and T5Gemma 2's log-sum-exp are XLA's alone.
    assert not native_attention.runs_here(jnp.zeros((2, 3, 4, 16)), rows, rows, softcap=50.0)
    assert not native_attention.runs_here(jnp.zeros((2, 3, 4, 16)), rows, rows, with_lse=True)
    big = jax.ShapeDtypeStruct((128, 4, 64, 64), jnp.float32)  # the demo's greedy batch
    assert native_attention.runs_here(jax.ShapeDtypeStruct((128, 4, 1, 64), jnp.float32), big, big)
    odd = jnp.zeros((2, 3, 4, 12))  # head_dim not a multiple of the kernel's 16 lanes
    assert not native_attention.runs_here(odd, jnp.zeros((2, 3, 5, 12)), jnp.zeros((2, 3, 5, 12)))


@needs_extension
def test_beam_search_decodes_the_same_tokens_through_the_kernel(monkeypatch):
    config = dataclasses.replace(
        get_config("t5_1_1/tiny"), dtype="float32", vocab_size=64, emb_dim=32, head_dim=16
    )
    params = build_model(config).init_params(jax.random.PRNGKey(1))
    inputs = np.random.default_rng(0).integers(2, 64, (3, 9)).astype(np.int32)
    inputs[1, 5:] = 0

    def beams():
        jax.clear_caches()
        return np.asarray(Model(config, params).generate(inputs, max_length=12, method="beam"))

    with monkeypatch.context() as patched:
        patched.setattr(native_attention, "runs_here", lambda *_args, **_kw: False)
        expected = beams()
    np.testing.assert_array_equal(beams(), expected)


@needs_extension
def test_bad_operands_are_one_clear_error():
    with pytest.raises(ConfigError, match=r"key = value \[G\*S, H, L, D\]"):
        native_attention.decode_attention(
            jnp.zeros((2, 3, 4, 16)),
            jnp.zeros((8, 3, 5, 16)),
            jnp.zeros((8, 3, 5, 16)),
            jnp.zeros((2, 4, 3, 4, 6)),  # 6 positions of bias for 5 of cache
        )


def test_the_switch_turns_the_kernel_off(monkeypatch):
    monkeypatch.setenv("T5FORGE_NATIVE_PRODUCTS", "0")
    rows = jnp.zeros((2, 3, 5, 16))
    assert not native_attention.runs_here(jnp.zeros((2, 3, 4, 16)), rows, rows)
    with pytest.raises(ConfigError, match="make install"):
        native_attention.decode_attention(jnp.zeros((2, 3, 4, 16)), rows, rows, None)
