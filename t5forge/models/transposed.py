"""bfloat16 Dense kernels stored transposed, [out, in], for decoding's products on XLA:CPU.

A decoding step multiplies a few rows by every kernel, so its products stream the weights.
XLA:CPU streams a bfloat16 [in, out] kernel slowly at few rows and a kernel stored [out, in]
(each output's weights contiguous) faster: T5 1.1 small's 49 decoder products chained in one
program took 9.2-12.1 ms at 8 rows stored [in, out] and 7.4-8.4 ms stored [out, in], 14.7 and
10.9-11.6 ms at 32 rows (Intel Xeon with AMX, 2 cores; docs/inference-dtypes.md). One row is
slower still in either layout (21-26 ms): XLA takes a matrix-vector path whose bfloat16 form
is slow, so a lone row is multiplied as two (the second zeros), 8.0-9.1 ms. Transposing inside
the program does not work: XLA does not hoist the copy out of the decoding loop, and the step
copied every kernel (16-22 ms instead of 7-10). So `load(weights_dtype='bfloat16')` stores
them transposed once, on a CPU, the fused projections' stacked kernels first made
(layers.stack_projections) so that they are transposed too.

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


def _stored(kernel, scanned: bool) -> jax.Array:
    stored = jnp.moveaxis(kernel, 0, -1)  # [*rest, in]; scanned: [layers, *rest, in]
    if scanned and stored.ndim > 2:
        stored = jnp.swapaxes(stored, 0, 1)
    return stored


def untransposed(params, scanned: bool = False):
    """`params` as they were before `transpose_kernels` (plain [in, ...] kernels), without the
    stacked kernels of fused projections (`layers.stack_projections`' '+' names): the tree a
    checkpoint of this model holds, for writing one."""
    if isinstance(params, TransposedKernel):
        stored = params.values
        if scanned and stored.ndim > 2:
            stored = jnp.swapaxes(stored, 0, 1)
        return jnp.moveaxis(stored, -1, 0)
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
    lone = rows.shape[0] == 1
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
