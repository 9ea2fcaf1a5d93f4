"""bfloat16 Dense kernels stored transposed, [out, in], for decoding's products on XLA:CPU.

A decoding step multiplies a few rows by every kernel, so its products stream the weights, and
XLA:CPU streams a bfloat16 kernel faster when each output's weights are contiguous (T5 1.1
small's decoder products: 1.2-1.4x at 8 and 32 rows; docs/inference-dtypes.md has the table).
Where the CPU has AMX a lone row is multiplied as two (the second zeros): XLA's bfloat16
matrix-vector path is slow there in either layout. On AVX2 alone (AMD Zen 3) the padding cost
batch-1 decoding 13% and the lone row is multiplied as it is. The layout is made once at load
(`load(weights_dtype='bfloat16')`, after layers.stack_projections so that fused groups are
transposed too): transposed inside the program, the copy was not hoisted out of the decoding
loop and every step paid it.

A `TransposedKernel` keeps scanned layers' axis 1 where scan slices it: a kernel [in, *rest]
is stored [*rest, in], and a scanned one [in, layers, *rest] as [rest[0], layers, *rest[1:],
in], which scan slices into the same [*rest, in] per layer.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from t5forge.errors import ConfigError
from t5forge.models.cpu_flags import cpu_flags


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class TransposedKernel:
    """A bfloat16 Dense kernel of logical shape [in, *rest] stored `values` [*rest, in]
    (scanned: [rest[0], layers, *rest[1:], in]). A pytree of that one array, so it rides
    through flax's variables, jit and scan wherever the kernel did."""

    values: jax.Array

    @property
    def shape(self) -> tuple[int, ...]:
        """The logical [in, *rest] of one layer's kernel (as multiplied)."""
        return (self.values.shape[-1], *self.values.shape[:-1])


def transposes_here() -> bool:
    """Whether bfloat16 kernels are stored transposed: on one CPU device (XLA:CPU's products
    are what it speeds up; a sharded kernel's partitioning names the plain layout's axes)."""
    return jax.default_backend() == "cpu" and jax.device_count() == 1


def transpose_kernels(params, scanned: bool = False):
    """`params` with every bfloat16 Dense kernel a TransposedKernel; experts' kernels stay
    plain (they multiply under vmap) and so do float32 ones. Under a module named 'layers'
    (nn.scan's) a kernel is [in, layers, ...]."""
    if not isinstance(params, dict):
        return params
    result = {}
    for name, child in params.items():
        # A fused group's stacked kernel is kept beside its module's own (its name joins
        # theirs with '+': layers.stacked_name).
        if (name == "kernel" or "+" in name) and _is_bf16_array(child):
            result[name] = TransposedKernel(_stored(child, scanned))
        elif "expert" in name or "router" in name:
            result[name] = child
        else:
            result[name] = transpose_kernels(child, scanned or name == "layers")
    return result


def _is_bf16_array(leaf) -> bool:
    return getattr(leaf, "ndim", 0) >= 2 and leaf.dtype == jnp.bfloat16


def _layers_second(array, scanned: bool) -> jax.Array:
    """A scanned kernel's layer axis moved between axes 0 and 1 (its own inverse)."""
    return jnp.swapaxes(array, 0, 1) if scanned and array.ndim > 2 else array


def _stored(kernel, scanned: bool) -> jax.Array:
    return _layers_second(jnp.moveaxis(kernel, 0, -1), scanned)  # [*rest, in]


def untransposed(params, scanned: bool = False):
    """`params` as they were before `transpose_kernels` (plain [in, ...] kernels), without the
    stacked kernels of fused projections (`layers.stack_projections`' '+' names): the tree a
    checkpoint of this model holds, for writing one."""
    if isinstance(params, TransposedKernel):
        return jnp.moveaxis(_layers_second(params.values, scanned), -1, 0)
    if not isinstance(params, dict):
        return params
    return {
        name: untransposed(child, scanned or name == "layers")
        for name, child in params.items()
        if "+" not in name
    }


def is_transposed(params) -> bool:
    """Whether any kernel of `params` is a TransposedKernel."""
    leaves = jax.tree.leaves(params, is_leaf=lambda leaf: isinstance(leaf, TransposedKernel))
    return any(isinstance(leaf, TransposedKernel) for leaf in leaves)


def transposed_product(x, kernel: TransposedKernel, dtype):
    """x [..., in] @ kernel (logical [in, *rest]) in `dtype`: bfloat16 operands, float32 sums
    (the fast form's numerics, products.dense_product), from the [*rest, in] layout."""
    values = kernel.values
    if x.shape[-1] != values.shape[-1]:
        raise ConfigError(
            f"a transposed kernel of logical shape {kernel.shape} cannot multiply inputs of "
            f"width {x.shape[-1]}"
        )
    rest = values.shape[:-1]
    rows = x.reshape(-1, x.shape[-1]).astype(jnp.bfloat16)
    lone = rows.shape[0] == 1 and _pads_lone_rows()
    if lone:  # XLA's matrix-vector path is the slow one in bfloat16 (module docstring)
        rows = jnp.concatenate([rows, jnp.zeros_like(rows)])
    product = jax.lax.dot_general(
        rows,
        values.reshape(int(np.prod(rest)), values.shape[-1]),
        (((1,), (1,)), ((), ())),
        preferred_element_type=jnp.float32,
    )
    if lone:
        product = product[:1]
    return product.astype(dtype).reshape(*x.shape[:-1], *rest)


def _pads_lone_rows() -> bool:
    """Whether a lone row is multiplied as two: where the CPU has AMX (the Xeon: T5 1.1 small's
    49 decoder products 8.0-9.1 ms as two rows, 21-26 as one), not on AVX2 alone (AMD Zen 3,
    in one process: batch-1 generate 0.626 s padded, 0.547 not, the plain layout's 0.546)."""
    return "amx_bf16" in cpu_flags()
