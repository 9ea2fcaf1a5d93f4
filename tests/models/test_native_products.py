"""The compiled oneDNN products equal XLA's plain dot: bf16 (float32 accumulation, every
transposed form) within bf16 rounding, int8 exactly on the int32 sums (weights plain or packed
once); under jit, lax.scan,
jax.checkpoint (with gradients) and vmap; bad input is one clear error. `make install` builds
the extension where a C++ compiler is present (CI does); without it these tests skip."""

from __future__ import annotations

import itertools
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from commands import eight_device_report

from t5forge.errors import ConfigError
from t5forge.models import native_products, quantized

needs_extension = pytest.mark.skipif(
    not native_products.available(),
    reason="t5forge_kernels is off: not built (make install builds it where a C++ compiler is) "
    "or T5FORGE_NATIVE_PRODUCTS=0",
)

needs_bf16_products = pytest.mark.skipif(
    not native_products.bf16_products_here(),
    reason="no compiled bf16 product here: t5forge_kernels off, or oneDNN has none for this CPU",
)
needs_int8_products = pytest.mark.skipif(
    not native_products.int8_products_here(),
    reason="no compiled int8 product here: t5forge_kernels off, or oneDNN's sums are not exact "
    "on this CPU (no VNNI)",
)

CONTRACTS = list(itertools.product((0, 1), (0, 1)))
# (M, K, N): odd sizes up to 300 and a single row, as decoding's batch-1 products have.
SHAPES = [(1, 77, 300), (37, 129, 5), (300, 1, 61), (128, 256, 64)]


def bf16_operands(rng, m, k, n, contract_a, contract_b):
    a = rng.standard_normal((m, k) if contract_a == 1 else (k, m))
    b = rng.standard_normal((k, n) if contract_b == 0 else (n, k))
    return jnp.asarray(a, jnp.bfloat16), jnp.asarray(b, jnp.bfloat16)


def xla_product(a, b, contract_a, contract_b):
    dims = (((contract_a,), (contract_b,)), ((), ()))
    return jax.lax.dot_general(a, b, dims, preferred_element_type=jnp.float32)


def assert_float32_product_close(actual, expected, k):
    """Same sums in another order: float32 rounding, scaled by the contraction length."""
    np.testing.assert_allclose(np.asarray(actual), np.asarray(expected), rtol=1e-5, atol=1e-5 * k)


@needs_bf16_products
@pytest.mark.parametrize(("contract_a", "contract_b"), CONTRACTS)
@pytest.mark.parametrize(("m", "k", "n"), SHAPES)
def test_bf16_matmul_equals_xla_dot_in_every_transposed_form(m, k, n, contract_a, contract_b):
    a, b = bf16_operands(np.random.default_rng(m * k + n), m, k, n, contract_a, contract_b)
    expected = xla_product(a, b, contract_a, contract_b)
    for out_dtype in (jnp.float32, jnp.bfloat16):
        product = jax.jit(
            lambda a, b, out_dtype=out_dtype: native_products.bf16_matmul(
                a, b, contract_a=contract_a, contract_b=contract_b, out_dtype=out_dtype
            )
        )
        actual = product(a, b)
        assert actual.shape == (m, n) and actual.dtype == out_dtype
        if out_dtype == jnp.float32:
            assert_float32_product_close(actual, expected, k)
        else:  # one bf16 rounding of the float32 sum
            np.testing.assert_allclose(
                np.asarray(actual, np.float32), np.asarray(expected), rtol=1e-2, atol=1e-2
            )


@needs_bf16_products
def test_bf16_matmul_runs_inside_scan_and_vmap():
    rng = np.random.default_rng(1)
    xs = jnp.asarray(rng.standard_normal((3, 5, 33)), jnp.bfloat16)
    w = jnp.asarray(rng.standard_normal((33, 17)), jnp.bfloat16)

    def step(carry, x):
        y = native_products.bf16_matmul(x, w, contract_a=1, contract_b=0, out_dtype=jnp.float32)
        return carry + y.sum(), y

    total, ys = jax.jit(lambda xs: jax.lax.scan(step, jnp.float32(0), xs))(xs)
    expected = jnp.einsum("bmk,kn->bmn", xs, w, preferred_element_type=jnp.float32)
    assert_float32_product_close(ys, expected, 33)
    np.testing.assert_allclose(float(total), float(expected.sum()), rtol=1e-4)
    mapped = jax.vmap(
        lambda x: native_products.bf16_matmul(
            x, w, contract_a=1, contract_b=0, out_dtype=jnp.float32
        )
    )(xs)
    assert_float32_product_close(mapped, expected, 33)


@needs_bf16_products
@pytest.mark.parametrize(("contract_a", "contract_b"), CONTRACTS)
def test_bf16_matmul_gradients_under_checkpoint_equal_xla_dots(contract_a, contract_b):
    a, b = bf16_operands(np.random.default_rng(2), 9, 31, 13, contract_a, contract_b)
    g = jnp.asarray(np.random.default_rng(3).standard_normal((9, 13)), jnp.float32)

    def loss(product):
        return jax.jit(jax.grad(jax.checkpoint(lambda a, b: (product(a, b) * g).sum()), (0, 1)))

    native = loss(
        lambda a, b: native_products.bf16_matmul(
            a, b, contract_a=contract_a, contract_b=contract_b, out_dtype=jnp.float32
        )
    )(a, b)
    xla = loss(lambda a, b: xla_product(a, b, contract_a, contract_b))(a, b)
    for actual, expected in zip(native, xla):
        assert actual.dtype == jnp.bfloat16 and actual.shape == expected.shape
        np.testing.assert_allclose(
            np.asarray(actual, np.float32), np.asarray(expected, np.float32), rtol=2e-2, atol=2e-2
        )


def int8_operands(rng, m, k, n):
    x = jnp.asarray(rng.integers(-128, 128, (m, k)), jnp.int8)
    w = jnp.asarray(rng.integers(-128, 128, (k, n)), jnp.int8)
    return x, w


def int32_sums(x, w):
    return jax.lax.dot(x, w, preferred_element_type=jnp.int32)


@needs_int8_products
@pytest.mark.parametrize(("m", "k", "n"), SHAPES)
def test_int8_matmul_sums_exactly_then_scales(m, k, n):
    rng = np.random.default_rng(m + k + n)
    x, w = int8_operands(rng, m, k, n)
    ones_m, ones_n = jnp.ones((m,), jnp.float32), jnp.ones((n,), jnp.float32)
    sums = jax.jit(native_products.int8_matmul, static_argnums=4)(x, ones_m, w, ones_n, jnp.float32)
    # Every |sum| < 2**24 here, so float32 holds the int32 sums exactly.
    np.testing.assert_array_equal(np.asarray(sums), np.asarray(int32_sums(x, w), np.float32))
    x_scale = jnp.asarray(rng.random(m) + 0.01, jnp.float32)
    w_scale = jnp.asarray(rng.random(n) + 0.01, jnp.float32)
    expected = int32_sums(x, w).astype(jnp.float32) * x_scale[:, None] * w_scale[None, :]
    for out_dtype in (jnp.float32, jnp.bfloat16):
        actual = native_products.int8_matmul(x, x_scale, w, w_scale, out_dtype)
        assert actual.dtype == out_dtype
        np.testing.assert_allclose(
            np.asarray(actual, np.float32),
            np.asarray(expected.astype(out_dtype), np.float32),
            rtol=1e-6,
        )


@needs_int8_products
@pytest.mark.parametrize(("k", "n"), [(77, 300), (512, 1024), (1, 61)])
def test_weights_packed_once_serve_every_row_count(k, n):
    """oneDNN's blocked layout does not depend on M: one packing, products of any row count."""
    rng = np.random.default_rng(k + n)
    _, w = int8_operands(rng, 1, k, n)
    packed = native_products.pack_int8_weights(w)
    assert packed.shape == (k, n) and packed.data.dtype == jnp.uint8
    w_scale = jnp.asarray(rng.random(n) + 0.01, jnp.float32)
    product = jax.jit(native_products.int8_matmul, static_argnums=4)
    for m in (1, 8, 37, 300):
        x, _ = int8_operands(rng, m, k, 1)
        x_scale = jnp.asarray(rng.random(m) + 0.01, jnp.float32)
        for out_dtype in (jnp.float32, jnp.bfloat16):
            np.testing.assert_array_equal(
                np.asarray(product(x, x_scale, packed, w_scale, out_dtype), np.float32),
                np.asarray(product(x, x_scale, w, w_scale, out_dtype), np.float32),
            )


@needs_int8_products
@pytest.mark.skipif(
    not native_products.amx_int8_products(),
    reason="this CPU has no AMX int8, or T5FORGE_AMX_INT8=0 switched the kernel off",
)
@pytest.mark.parametrize(("k", "n"), [(77, 61), (512, 1000), (1024, 64), (3, 130)])
def test_amx_kernel_sums_as_onednn_at_every_row_count_it_takes(k, n, amx_setting):
    """Packed products of up to 32 rows run on the AMX kernel: the same int32 sums as oneDNN's
    matmul on the same packed weights, for odd contractions (zero padded to 64) and column
    counts (a part tile at the end), 1-16 rows (one row tile) and 17-32 (two); 33 rows stay
    with oneDNN."""
    rng = np.random.default_rng(k * n)
    _, w = int8_operands(rng, 1, k, n)
    packed = native_products.pack_int8_weights(w)
    ones_n = jnp.ones((n,), jnp.float32)
    product = jax.jit(native_products.int8_matmul, static_argnums=4)
    for m in (1, 5, 16, 17, 32, 33):
        x, _ = int8_operands(rng, m, k, 1)
        ones_m = jnp.ones((m,), jnp.float32)
        sums = {}
        for amx in (True, False):
            native_products.amx_int8_products(amx)
            sums[amx] = np.asarray(product(x, ones_m, packed, ones_n, jnp.float32))
        np.testing.assert_array_equal(sums[True], sums[False], f"{m} rows")
        np.testing.assert_array_equal(sums[True], np.asarray(int32_sums(x, w), np.float32))


@needs_int8_products
@pytest.mark.parametrize("amx", [True, False], ids=["amx-if-present", "onednn"])
@pytest.mark.parametrize("in_dtype", [jnp.float32, jnp.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize(("m", "k", "n"), [(1, 77, 300), (8, 512, 1024), (37, 129, 5)])
def test_packed_dense_quantises_its_rows_as_quantize_rows_does(m, k, n, in_dtype, amx, amx_setting):
    """One call (rows quantised inside it) gives exactly the values of quantize_rows then the
    packed product, on the AMX kernel and oneDNN's: rows of every magnitude, a row of zeros,
    and values on the rounding boundaries (x / scale exactly half-way)."""
    rng = np.random.default_rng(m * k + n)
    rows = rng.standard_normal((m, k)) * rng.choice([1e-3, 1.0, 40.0], size=(m, 1))
    rows[0] = rng.uniform(-100, 100, k)
    rows[0, :4] = [127.0, 0.5, -2.5, 63.5]  # largest 127, so scale 1: half-way values
    if m > 2:
        rows[1] = 0.0
    x = jnp.asarray(rows, in_dtype)
    _, w = int8_operands(rng, 1, k, n)
    packed = native_products.pack_int8_weights(w)
    w_scale = jnp.asarray(rng.random(n) + 0.01, jnp.float32)
    native_products.amx_int8_products(amx)
    for out_dtype in (jnp.float32, jnp.bfloat16):
        fused = jax.jit(native_products.packed_int8_dense, static_argnums=3)
        apart = jax.jit(
            lambda x, out_dtype=out_dtype: native_products.int8_matmul(
                *quantized.quantize_rows(x), packed, w_scale, out_dtype
            )
        )
        actual = fused(x, packed, w_scale, out_dtype)
        assert actual.dtype == out_dtype
        np.testing.assert_array_equal(
            np.asarray(actual, np.float32), np.asarray(apart(x), np.float32)
        )


@needs_extension
def test_packed_dense_bad_input_is_one_clear_error():
    packed = native_products.pack_int8_weights(np.ones((6, 5), np.int8))
    w_scale = jnp.ones((5,), jnp.float32)
    with pytest.raises(ConfigError, match="float32 or bfloat16"):
        native_products.packed_int8_dense(jnp.ones((4, 6), jnp.int8), packed, w_scale, jnp.float32)
    with pytest.raises(ConfigError, match="do not contract"):
        native_products.packed_int8_dense(jnp.ones((4, 7)), packed, w_scale, jnp.float32)
    with pytest.raises(ConfigError, match="w_scale must be float32 of shape"):
        native_products.packed_int8_dense(jnp.ones((4, 6)), packed, w_scale[:4], jnp.float32)


@needs_extension
def test_the_amx_switch_turns_on_only_where_the_cpu_has_amx(amx_setting):
    assert native_products.amx_int8_products(False) is False
    cpu_has_amx = "amx_int8" in Path("/proc/cpuinfo").read_text().split()
    assert native_products.amx_int8_products(True) is cpu_has_amx


@needs_extension
def test_packing_checks_its_input():
    with pytest.raises(ConfigError, match="outside jit"):
        jax.jit(native_products.pack_int8_weights)(jnp.ones((4, 5), jnp.int8))
    with pytest.raises(ConfigError, match="w_q must be a 2-D int8"):
        native_products.pack_int8_weights(np.ones((4, 5), np.float32))
    packed = native_products.pack_int8_weights(np.ones((4, 5), np.int8))
    with pytest.raises(ConfigError, match="do not contract"):
        native_products.int8_matmul(
            jnp.ones((2, 6), jnp.int8),
            jnp.ones((2,), jnp.float32),
            packed,
            jnp.ones((5,), jnp.float32),
            jnp.float32,
        )


@needs_int8_products
@pytest.mark.parametrize("packed", [False, True], ids=["plain", "packed"])
def test_int8_matmul_extremes_do_not_saturate(packed):
    """-128 x -128 over a long contraction: VNNI's u8 x s8 path must compensate, not clip (and
    the AMX kernel, which packed weights of few rows take, sum s8 x s8 exactly)."""
    k = 1027
    x = jnp.full((3, k), -128, jnp.int8)
    w = jnp.concatenate([jnp.full((k, 2), -128, jnp.int8), jnp.full((k, 1), 127, jnp.int8)], 1)
    weights = native_products.pack_int8_weights(w) if packed else w
    sums = native_products.int8_matmul(
        x, jnp.ones((3,), jnp.float32), weights, jnp.ones((3,), jnp.float32), jnp.float32
    )
    np.testing.assert_array_equal(
        np.asarray(sums), np.tile(np.array([16384 * k, 16384 * k, -16256 * k], np.float32), (3, 1))
    )


@needs_int8_products
def test_int8_matmul_runs_inside_scan():
    rng = np.random.default_rng(4)
    x, w = int8_operands(rng, 4, 65, 7)
    xs = jnp.stack([x, -x])
    x_scale, w_scale = jnp.full((4,), 0.5, jnp.float32), jnp.full((7,), 0.25, jnp.float32)

    def step(carry, x):
        return carry, native_products.int8_matmul(x, x_scale, w, w_scale, jnp.float32)

    _, ys = jax.jit(lambda xs: jax.lax.scan(step, 0, xs))(xs)
    expected = int32_sums(x, w).astype(jnp.float32) * 0.125
    np.testing.assert_array_equal(np.asarray(ys), np.asarray(jnp.stack([expected, -expected])))


@needs_extension
@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda a, b: native_products.bf16_matmul(a[None], b, out_dtype=jnp.float32), "2-D"),
        (lambda a, b: native_products.bf16_matmul(a.astype(jnp.float32), b, out_dtype=jnp.float32), "bfloat16"),
        (lambda a, b: native_products.bf16_matmul(a, a, out_dtype=jnp.float32), "contracts axis"),
        (lambda a, b: native_products.bf16_matmul(a, b, contract_a=2, out_dtype=jnp.float32), "contract_a"),
        (lambda a, b: native_products.bf16_matmul(a, b, out_dtype=jnp.int32), "out_dtype"),
    ],
)  # fmt: skip
def test_bf16_matmul_bad_input_is_one_clear_error(call, message):
    a, b = jnp.ones((4, 6), jnp.bfloat16), jnp.ones((6, 5), jnp.bfloat16)
    with pytest.raises(ConfigError, match=message):
        call(a, b)


@needs_extension
def test_int8_matmul_bad_input_is_one_clear_error():
    x, w = jnp.ones((4, 6), jnp.int8), jnp.ones((6, 5), jnp.int8)
    scales = jnp.ones((4,), jnp.float32), jnp.ones((5,), jnp.float32)
    with pytest.raises(ConfigError, match="w_scale must be float32 of shape"):
        native_products.int8_matmul(x, scales[0], w, scales[0], jnp.float32)
    with pytest.raises(ConfigError, match="do not contract"):
        native_products.int8_matmul(x, scales[0], w.T, scales[1], jnp.float32)
    with pytest.raises(ConfigError, match="int8"):
        native_products.int8_matmul(x.astype(jnp.int32), scales[0], w, scales[1], jnp.float32)


@needs_extension
def test_the_custom_call_itself_rejects_mismatched_shapes_without_crashing():
    """Past the Python checks, the handler answers with an error, not a crash."""
    call = jax.ffi.ffi_call("t5forge_bf16_matmul", jax.ShapeDtypeStruct((4, 5), jnp.float32))
    a, b = jnp.ones((4, 6), jnp.bfloat16), jnp.ones((7, 5), jnp.bfloat16)
    with pytest.raises(Exception, match="contracting sizes differ"):
        call(a, b, contract_a=np.int64(1), contract_b=np.int64(0)).block_until_ready()
    packed_call = jax.ffi.ffi_call(
        "t5forge_packed_int8_matmul", jax.ShapeDtypeStruct((4, 5), jnp.float32)
    )
    x, scales = jnp.ones((4, 6), jnp.int8), jnp.ones((4,), jnp.float32)
    with pytest.raises(Exception, match="packed weights do not fit"):
        packed_call(x, scales, jnp.ones((7,), jnp.uint8), scales[:1].repeat(5)).block_until_ready()


@needs_bf16_products
@needs_int8_products
def test_products_run_per_device_on_a_mesh():
    """Inside shard_map each device calls its own product; a plain jit over sharded operands
    runs it on gathered ones (no sharding rule is registered). All equal XLA's dot."""
    report = eight_device_report(Path(__file__).with_name("multidevice_native_products_check.py"))
    assert len(report) == 4
    for check, difference in report.items():
        assert difference < 1e-4, check


@needs_extension
def test_the_probes_say_what_the_products_give_on_this_cpu():
    """bf16_products_here / int8_products_here are True exactly where oneDNN's products are
    exact on operands other than the probes' own (full-range int8 rows, a long contraction;
    AVX2 without VNNI saturates them, and has no bf16 matmul at all)."""
    rng = np.random.default_rng(7)
    x, w = int8_operands(rng, 9, 700, 33)
    ones = jnp.ones((9,), jnp.float32), jnp.ones((33,), jnp.float32)
    expected = np.asarray(int32_sums(x, w), np.float32)
    int8_exact = all(
        np.array_equal(
            np.asarray(native_products.int8_matmul(x, ones[0], w_q, ones[1], jnp.float32)), expected
        )
        for w_q in (w, native_products.pack_int8_weights(w))
    )
    assert native_products.int8_products_here() == int8_exact
    a, b = (jnp.asarray(rng.integers(-8, 8, shape), jnp.bfloat16) for shape in ((5, 40), (40, 6)))
    try:
        got = native_products.bf16_matmul(a, b, out_dtype=jnp.float32)
        bf16_exact = np.array_equal(
            np.asarray(got), np.asarray(a, np.float32) @ np.asarray(b, np.float32)
        )
    except jax.errors.JaxRuntimeError:
        bf16_exact = False
    assert native_products.bf16_products_here() == bf16_exact


def test_the_switch_turns_the_products_off(monkeypatch):
    monkeypatch.setenv("T5FORGE_NATIVE_PRODUCTS", "0")
    assert not native_products.available()
    with pytest.raises(ConfigError, match="make install"):
        native_products.bf16_matmul(
            jnp.ones((2, 2), jnp.bfloat16), jnp.ones((2, 2), jnp.bfloat16), out_dtype=jnp.float32
        )
