"""Int8 Dense kernels for inference: per-output-channel quantisation and the int8 product.

`load(weights_dtype='int8')` replaces each Dense kernel by an `Int8Kernel`: int8 values of the
kernel's shape and a float32 scale per output channel (the largest |weight| of that column over
the contracting axis, / 127), kept with the contracting axis as size 1 so that scanned layers'
axis 1 and fused kernels' [in, n, out] slice, stack and scan exactly as the float kernel did.
The product quantises its input per row (per token) the same way, multiplies int8 by int8 and
scales the sums back: (x_q @ w_q) * x_scale[:, None] * w_scale[None, :].

XLA:CPU has no fast int8 dot (int8 x int8 -> int32 ran at ~30 GFLOP/s on a 1024-row prefill,
a tenth of bfloat16's; docs/inference-dtypes.md has the table), so `xla_int8_matmul` computes
the same integer sums on XLA's fast path: int8 values are exact in bfloat16, and bfloat16
operands with float32 accumulation run on XLA's YNNPACK fusion (float32 operands on a CPU
without bfloat16 instructions, where that is faster: `_widened_dtype`). A compiled int8 matmul
with the same signature (t5forge.models.native_products.int8_matmul) can take its place in
`int8_product` without changing any number beyond float32 rounding of the sums; it reads the
kernel `packed` (once, at load: `pack_kernels`) where the kernel has it, so no call reorders the
weights into the compiled product's own layout (a decoding step's products took 2-3x as long
on plain weights, on an Intel Xeon with AMX: docs/cpu-kernels.md), and quantises the input
rows inside the same call (`native_products.packed_int8_dense`), to the same values.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np

from t5forge.errors import ConfigError
from t5forge.models import native_products
from t5forge.models.cpu_flags import multiplies_bfloat16

INT8_MAX = 127


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Int8Kernel:
    """A Dense kernel stored as int8 `values` (the kernel's shape) times a float32 `scale` (the
    kernel's shape with its contracting axis 1). A pytree of those two arrays, so it rides
    through flax's variables, jit, scan and tree maps wherever the float kernel did."""

    values: jax.Array
    scale: jax.Array
    # The values per matrix [in, prod(rest)] in the compiled int8 product's layout for this CPU
    # (uint8 [1, bytes], or [1, layers, bytes] for scanned layers, whose axis 1 scan slices),
    # or None: `pack_kernels`. A packed kernel's `values` keep only their shape, as an empty
    # trailing axis ([*shape, 0]: no bytes, sliced by scan like the rest), so that the packed
    # copy replaces the plain one in memory instead of doubling it.
    packed: jax.Array | None = None

    @property
    def shape(self) -> tuple[int, ...]:
        return self.values.shape[:-1] if self.packed is not None else self.values.shape


def _symmetric_int8(x, axis: int):
    """(int8 values, float32 scale with `axis` kept as 1): x ~ values * scale, per slice along
    `axis`; an all-zero slice gets scale 1 (its values are 0)."""
    # Written as products by reciprocals, the form XLA's simplifier gives divisions anyway,
    # so that the compiled product's own quantisation (native_products.packed_int8_dense)
    # computes the same float32 operations.
    x = jnp.asarray(x, jnp.float32)
    scale = jnp.max(jnp.abs(x), axis=axis, keepdims=True) * np.float32(1 / INT8_MAX)
    scale = jnp.where(scale == 0, 1.0, scale)
    values = jnp.clip(jnp.round(x * (1 / scale)), -INT8_MAX, INT8_MAX).astype(jnp.int8)
    return values, scale


def quantize_kernel(kernel, contracting_axis: int = 0) -> Int8Kernel:
    """`kernel` as an Int8Kernel, one scale per output channel (per slice along
    `contracting_axis`: 0 for a Dense kernel [in, ...], -2 for experts' [experts, ..., in, out])."""
    values, scale = _symmetric_int8(kernel, contracting_axis)
    return Int8Kernel(values, scale)


def dequantize_kernel(kernel: Int8Kernel) -> jax.Array:
    """The float32 kernel an Int8Kernel stands for (an unpacked one: packing keeps no plain
    values)."""
    _require_plain(kernel, "dequantised")
    return kernel.values.astype(jnp.float32) * kernel.scale


def _require_plain(kernel: Int8Kernel, what: str) -> None:
    if kernel.packed is not None:
        raise ConfigError(
            f"an int8 kernel packed at load for the compiled int8 product cannot be {what}; "
            "load the checkpoint again with weights_dtype='int8' where it is to run"
        )


def quantize_rows(x):
    """(int8 x_q [M, K], float32 x_scale [M]): each row of x [M, K] quantised on its own."""
    values, scale = _symmetric_int8(x, -1)
    return values, scale[:, 0]


def xla_int8_matmul(x_q, x_scale, w_q, w_scale, out_dtype):
    """(x_q [M, K] @ w_q [K, N]) * x_scale[:, None] * w_scale[None, :], in `out_dtype`, on
    XLA's fast path: the int8 operands widened exactly to bfloat16 (or to float32 on a CPU
    without bfloat16 instructions, where XLA's bfloat16 product is the slower one), summed in
    float32 either way: the same sums."""
    wide = _widened_dtype()
    sums = jax.lax.dot_general(
        x_q.astype(wide),
        w_q.astype(wide),
        (((1,), (0,)), ((), ())),
        preferred_element_type=jnp.float32,
    )
    return (sums * x_scale[:, None] * w_scale[None, :]).astype(out_dtype)


def _widened_dtype():
    """bfloat16 on GPUs, TPUs and CPUs with bfloat16 dot instructions; float32 on the others
    (AMD Zen 3, int8 T5 1.1 small, separate processes: greedy batch 8 1.84 -> 1.57 s, beam 4
    4.66 -> 3.99 s, batch 1 0.564 -> 0.495 s; docs/inference-dtypes.md)."""
    if jax.default_backend() == "cpu" and not multiplies_bfloat16():
        return jnp.float32
    return jnp.bfloat16


def int8_product(x, kernel: Int8Kernel, dtype):
    """x [..., in] @ kernel [in, ...] in `dtype`, x quantised per row (per token)."""
    rows = x.reshape(-1, x.shape[-1])
    out_shape = kernel.shape[1:]
    w_scale = kernel.scale.reshape(-1)
    # The compiled int8 product (AMX / VNNI) where it replaces XLA's here, on the packed weights
    # (quantising the rows inside the same call) where they are; else XLA's widened one.
    compiled = native_products.int8_products_here()
    if kernel.packed is not None:
        if not compiled:
            _require_plain(kernel, "multiplied without the compiled int8 product")
        matrix = (kernel.shape[0], math.prod(out_shape))
        w_q = native_products.PackedInt8Weights(kernel.packed.reshape(-1), matrix)
        product = native_products.packed_int8_dense(rows, w_q, w_scale, dtype)
    else:
        w_q = kernel.values.reshape(kernel.values.shape[0], -1)
        matmul = native_products.int8_matmul if compiled else xla_int8_matmul
        product = matmul(*quantize_rows(rows), w_q, w_scale, dtype)
    return product.reshape(*x.shape[:-1], *out_shape)


def pack_kernels(params, scanned: bool = False):
    """`params` with every Int8Kernel also `packed` for the compiled int8 product on this
    machine, once, on the host; experts' kernels stay plain (they multiply under vmap). Under a
    module named 'layers' (nn.scan's) a kernel is [in, layers, ...]: each layer's matrix is
    packed on its own."""
    if isinstance(params, Int8Kernel):
        return params if params.packed is not None else _packed(params, scanned)
    if not isinstance(params, dict):
        return params
    return {
        name: child if "expert" in name else pack_kernels(child, scanned or name == "layers")
        for name, child in params.items()
    }


def _packed(kernel: Int8Kernel, scanned: bool) -> Int8Kernel:
    values = np.asarray(jax.device_get(kernel.values))
    matrices = list(np.moveaxis(values, 1, 0)) if scanned else [values]
    blobs = [
        np.asarray(native_products.pack_int8_weights(matrix.reshape(matrix.shape[0], -1)).data)
        for matrix in matrices
    ]
    packed = np.stack(blobs)[None] if scanned else blobs[0][None]
    shape_only = jnp.zeros((*values.shape, 0), jnp.int8)
    return dataclasses.replace(kernel, values=shape_only, packed=jnp.asarray(packed))
