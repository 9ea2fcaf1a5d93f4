"""oneDNN's products where XLA:CPU has no fast form, called through XLA's FFI.

The compiled module `t5forge_kernels` (kernels/, built by `make install` when a C++ compiler is
present) holds two XLA custom calls: a bf16 matmul with float32 accumulation whose operands may
each be stored transposed (so the weight gradient aT @ g is one call, no transposed copy), and
int8 x int8 -> int32 with per-row and per-column scales, its weights plain or packed once at load
(`pack_int8_weights`: oneDNN's blocked layout, so no call reorders them). Where the CPU has AMX,
packed products of up to 32 rows (decoding's) run on the module's own AMX kernel instead of
oneDNN's matmul (`amx_int8_products`); `packed_int8_dense` is that packed product with the
rows' quantisation done inside the call. They trace like any jax op: under jit, lax.scan,
jax.checkpoint, and vmap (one call per batch element). `bf16_matmul` has a gradient (its two
backward products are the same call); `int8_matmul` is for inference.

Callers check `available()` and use XLA's own products when it is False: the module is absent,
failed to load, or T5FORGE_NATIVE_PRODUCTS=0 turns it off (docs/cpu-kernels.md).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from t5forge.errors import ConfigError

logger = logging.getLogger(__name__)

_OUTPUT_DTYPES = (jnp.float32, jnp.bfloat16)


# OpenMP's threads (libdnnl.so.3 is its GNU OpenMP build) spin between products by default,
# taking the cores XLA's own threads wait for: on the shared 2-core machine a 256x512x128
# product took 22 ms spinning and 0.09 ms sleeping (OMP_WAIT_POLICY=PASSIVE). libgomp reads the
# variable once, when the module loads it; a value the user set is kept.
_OPENMP_SETTINGS = {"OMP_WAIT_POLICY": "PASSIVE"}


@functools.cache
def _load() -> Any:
    """The compiled module with its FFI targets registered, or None when it cannot load."""
    before = {name: os.environ.get(name) for name in _OPENMP_SETTINGS}
    for name, value in _OPENMP_SETTINGS.items():
        os.environ.setdefault(name, value)
    try:
        import t5forge_kernels
    except ImportError:
        return None
    finally:  # only this module's OpenMP runtime is meant, not torch's or a child process's
        for name, value in before.items():
            if value is None:
                os.environ.pop(name)
            else:
                os.environ[name] = value
    for name, capsule in t5forge_kernels.ffi_targets().items():
        jax.ffi.register_ffi_target(name, capsule, platform="cpu")
    return t5forge_kernels


def available() -> bool:
    """Whether the compiled products run on this machine (else use XLA's)."""
    if os.environ.get("T5FORGE_NATIVE_PRODUCTS", "1") == "0":
        return False
    return jax.default_backend() == "cpu" and _load() is not None


def replaces_xla_here() -> bool:
    """Whether a network's compiled calls should replace XLA's: available, and the program
    runs on one device (the custom calls have no sharding rule; a sharded program would gather
    their operands, so it keeps XLA's products). The products ask more of the CPU:
    `bf16_products_here`, `int8_products_here`."""
    return available() and jax.device_count() == 1


def bf16_products_here() -> bool:
    """`replaces_xla_here`, and oneDNN multiplies bfloat16 on this CPU: it has no bf16 matmul
    without AVX-512 (on AVX2 alone, AMD's Zen 3 for one, creating it fails)."""
    return replaces_xla_here() and _probe("bf16")


def int8_products_here() -> bool:
    """`replaces_xla_here`, and oneDNN's int8 sums are exact on this CPU. Without VNNI (AVX2
    alone: AMD's Zen 3) it adds pairs of u8 x s8 products in saturating int16, and T5's rows
    came out wrong (-34335 for -46606); XLA's int8 product then runs."""
    return replaces_xla_here() and _probe("int8")


@functools.cache
def _probe(kind: str) -> bool:
    """Whether the compiled product of `kind` gives exact results here, tried once on small
    operands: bf16's on values exact in bfloat16, int8's (plain and packed weights) at int8's
    extremes, where a saturating sum parts from the exact one. Runs eagerly even when asked
    while a program is traced."""
    with jax.ensure_compile_time_eval():
        try:
            exact = _bf16_probe() if kind == "bf16" else _int8_probe()
        except jax.errors.JaxRuntimeError:
            exact = False
    if not exact:
        logger.info("oneDNN's %s product is not exact on this CPU; XLA's runs instead", kind)
    return exact


def _bf16_probe() -> bool:
    a = np.arange(-16, 16, dtype=np.float32).reshape(4, 8)
    b = np.arange(24, dtype=np.float32).reshape(8, 3) - 12
    got = bf16_matmul(
        jnp.asarray(a, jnp.bfloat16), jnp.asarray(b, jnp.bfloat16), out_dtype=jnp.float32
    )
    return bool(np.array_equal(np.asarray(got), a @ b))


def _int8_probe() -> bool:
    pattern = np.tile(np.array([127, -128, 127, 127, -128, -128, 127, -1], np.int8), 16)
    x_q = np.stack([np.full(128, 127, np.int8), np.full(128, -128, np.int8), pattern])
    w_q = np.ascontiguousarray(x_q.T)  # [128, 3]
    ones = jnp.ones((3,), jnp.float32)
    exact = x_q.astype(np.int64) @ w_q.astype(np.int64)
    products = (
        int8_matmul(jnp.asarray(x_q), ones, jnp.asarray(w_q), ones, jnp.float32),
        int8_matmul(jnp.asarray(x_q), ones, pack_int8_weights(w_q), ones, jnp.float32),
    )
    return all(np.array_equal(np.asarray(p), exact) for p in products)


def onednn_version() -> str | None:
    """The oneDNN version the compiled module loaded, or None without it."""
    module = _load()
    return module.onednn_version() if module is not None else None


def amx_int8_products(enabled: bool | None = None) -> bool:
    """Whether packed int8 products of up to 32 rows (decoding's) run on the AMX kernel rather
    than oneDNN's matmul: False without AMX or the module. `enabled` switches it first (for A/B
    runs and tests; T5FORGE_AMX_INT8=0 switches it off at load). The sums are exact either way."""
    module = _load()
    if module is None:
        return False
    if enabled is not None:
        module.set_amx_int8_enabled(enabled)
    return module.amx_int8_enabled()


def require() -> None:
    """One clear error where the compiled module is not there (its callers check first)."""
    if not available():
        raise ConfigError(
            "t5forge's compiled CPU kernels are off: build them with `make install` (needs a "
            "C++ compiler), or check native_products.available() and use XLA's formulation"
        )


def _check_matrix(name: str, value: Any, dtype: Any) -> None:
    if value.ndim != 2 or value.dtype != dtype:
        raise ConfigError(
            f"{name} must be a 2-D {np.dtype(dtype).name} array, got shape {value.shape} "
            f"{value.dtype}"
        )


def _check_out_dtype(out_dtype: Any) -> jnp.dtype:
    dtype = jnp.dtype(out_dtype)
    if dtype not in [jnp.dtype(d) for d in _OUTPUT_DTYPES]:
        raise ConfigError(f"out_dtype must be float32 or bfloat16, got {dtype.name}")
    return dtype


def bf16_matmul(
    a: jax.Array, b: jax.Array, *, contract_a: int = 1, contract_b: int = 0, out_dtype: Any
) -> jax.Array:
    """a @ b over a's axis `contract_a` and b's axis `contract_b`, accumulated in float32.

    a is [M, K] (contract_a=1) or [K, M] (contract_a=0); b is [K, N] (contract_b=0) or [N, K]
    (contract_b=1); the result is [M, N] in out_dtype (float32 or bfloat16). The weight
    gradient x^T @ g is `bf16_matmul(x, g, contract_a=0, contract_b=0, ...)`.
    """
    require()
    _check_matrix("a", a, jnp.bfloat16)
    _check_matrix("b", b, jnp.bfloat16)
    for name, axis in (("contract_a", contract_a), ("contract_b", contract_b)):
        if axis not in (0, 1):
            raise ConfigError(f"{name} must be 0 or 1 (the operand's contracting axis), got {axis}")
    if a.shape[contract_a] != b.shape[contract_b]:
        raise ConfigError(
            f"bf16_matmul: a {a.shape} contracts axis {contract_a} ({a.shape[contract_a]}) but "
            f"b {b.shape} axis {contract_b} ({b.shape[contract_b]})"
        )
    return _bf16_product(a, b, contract_a, contract_b, _check_out_dtype(out_dtype))


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3, 4))
def _bf16_product(a, b, contract_a, contract_b, out_dtype):
    shape = (a.shape[1 - contract_a], b.shape[1 - contract_b])
    if 0 in a.shape or 0 in b.shape:
        return jnp.zeros(shape, out_dtype)
    call = jax.ffi.ffi_call(
        "t5forge_bf16_matmul",
        jax.ShapeDtypeStruct(shape, out_dtype),
        vmap_method="sequential",
    )
    return call(a, b, contract_a=np.int64(contract_a), contract_b=np.int64(contract_b))


def _bf16_product_forward(a, b, contract_a, contract_b, out_dtype):
    return _bf16_product(a, b, contract_a, contract_b, out_dtype), (a, b)


def _bf16_product_backward(contract_a, contract_b, _out_dtype, residuals, g):
    """Both gradients are products of the same kind: no operand is transposed in memory."""
    a, b = residuals
    g = g.astype(jnp.bfloat16)
    b_n_axis = 1 - contract_b  # b's free (N) axis, which g contracts with in da
    a_m_axis = 1 - contract_a  # a's free (M) axis, which g contracts with in db
    if contract_a == 1:  # a is [M, K]: da = g @ B^T
        da = _bf16_product(g, b, 1, b_n_axis, jnp.bfloat16)
    else:  # a is [K, M]: da = B @ g^T
        da = _bf16_product(b, g, b_n_axis, 1, jnp.bfloat16)
    if contract_b == 0:  # b is [K, N]: db = A^T @ g
        db = _bf16_product(a, g, a_m_axis, 0, jnp.bfloat16)
    else:  # b is [N, K]: db = g^T @ A
        db = _bf16_product(g, a, 0, a_m_axis, jnp.bfloat16)
    return da, db


_bf16_product.defvjp(_bf16_product_forward, _bf16_product_backward)


@functools.partial(jax.tree_util.register_dataclass, data_fields=["data"], meta_fields=["shape"])
@dataclasses.dataclass(frozen=True)
class PackedInt8Weights:
    """int8 [K, N] weights in oneDNN's blocked layout for this CPU (uint8 bytes, the signed
    compensation included). Made at load by `pack_int8_weights`; never saved: another CPU may
    want another layout."""

    data: jax.Array
    shape: tuple[int, int]


def pack_int8_weights(w_q: Any) -> PackedInt8Weights:
    """int8 [K, N] weights packed once for every `int8_matmul` on them (outside jit)."""
    require()
    try:
        weights = np.ascontiguousarray(np.asarray(w_q))
    except jax.errors.TracerArrayConversionError:
        raise ConfigError("pack_int8_weights runs at load time, outside jit") from None
    _check_matrix("w_q", weights, np.int8)
    packed = _load().pack_int8_weights(weights)
    return PackedInt8Weights(jnp.asarray(packed), tuple(weights.shape))


def _int8_sizes(call: str, x_name: str, x, w_q, scales: dict, out_dtype: Any) -> tuple:
    """(M, K, N, output dtype) of an int8 product x [M, K] @ w_q [K, N], its float32 scales
    ({"x_scale": [M], "w_scale": [N]}, either) checked: one ConfigError naming what does not
    fit."""
    (m, k), (k_w, n) = x.shape, w_q.shape
    if k != k_w:
        raise ConfigError(f"{call}: {x_name} {x.shape} and w_q {w_q.shape} do not contract")
    for name, scale in scales.items():
        size = m if name == "x_scale" else n
        if scale.shape != (size,) or scale.dtype != jnp.float32:
            raise ConfigError(
                f"{name} must be float32 of shape ({size},), got {scale.shape} {scale.dtype}"
            )
    return m, k, n, _check_out_dtype(out_dtype)


def int8_matmul(
    x_q: jax.Array,
    x_scale: jax.Array,
    w_q: jax.Array | PackedInt8Weights,
    w_scale: jax.Array,
    out_dtype: Any,
) -> jax.Array:
    """(x_q @ w_q) * x_scale[:, None] * w_scale[None, :], summed exactly in int32.

    x_q int8 [M, K] with float32 per-row scales [M]; w_q int8 [K, N] (or the same packed by
    `pack_int8_weights`) with float32 per-column scales [N]; the result [M, N] in out_dtype
    (float32 or bfloat16).
    """
    require()
    _check_matrix("x_q", x_q, jnp.int8)
    packed = isinstance(w_q, PackedInt8Weights)
    if not packed:
        _check_matrix("w_q", w_q, jnp.int8)
    m, k, n, dtype = _int8_sizes(
        "int8_matmul", "x_q", x_q, w_q, {"x_scale": x_scale, "w_scale": w_scale}, out_dtype
    )
    if 0 in (m, k, n):
        return jnp.zeros((m, n), dtype)
    target = "t5forge_packed_int8_matmul" if packed else "t5forge_int8_matmul"
    call = jax.ffi.ffi_call(target, jax.ShapeDtypeStruct((m, n), dtype), vmap_method="sequential")
    return call(x_q, x_scale, w_q.data if packed else w_q, w_scale)


def packed_int8_dense(
    x: jax.Array, w_q: PackedInt8Weights, w_scale: jax.Array, out_dtype: Any
) -> jax.Array:
    """`int8_matmul(*quantized.quantize_rows(x), w_q, w_scale, out_dtype)` as one call: x
    (float32 or bfloat16 [M, K]) is quantised per row inside it, to the same values and scales.
    A decoding step then runs one op per product instead of three (the rows' largest |x|, the
    quantising fusion, the product)."""
    require()
    if x.ndim != 2 or x.dtype not in (jnp.float32, jnp.bfloat16):
        raise ConfigError(
            f"x must be a 2-D float32 or bfloat16 array, got shape {x.shape} {x.dtype}"
        )
    m, k, n, dtype = _int8_sizes("packed_int8_dense", "x", x, w_q, {"w_scale": w_scale}, out_dtype)
    if 0 in (m, k, n):
        return jnp.zeros((m, n), dtype)
    call = jax.ffi.ffi_call(
        "t5forge_packed_int8_dense", jax.ShapeDtypeStruct((m, n), dtype), vmap_method="sequential"
    )
    return call(x, w_q.data, w_scale)
