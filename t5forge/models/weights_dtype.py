"""The dtype a model's matmul weights are stored in for inference (`load(weights_dtype=...)`).

Only the Dense kernels change: products.dense_product multiplies a kernel stored narrower than
the compute dtype in its own dtype, so bfloat16 kernels read half the bytes per decoding step,
while embeddings, norms and relative-position tables keep float32. 'int8' stores each kernel
as int8 with a float32 scale per output channel (models/quantized.py), and its products
quantise their inputs per token. A mixture of experts' router keeps float32 too: Switch routes
in float32 on purpose ("selective precision"), and a narrower router could send tokens to
other experts.

Where the compiled int8 product runs (models/native_products.py), int8 kernels are also packed
once into its layout (`quantized.pack_kernels`), the fused projections' stacked kernels first
made (`layers.stack_projections`) so that they are packed too. On a CPU, bfloat16 kernels are
likewise stacked and then stored transposed (models/transposed.py: XLA:CPU streams them
faster that way at decoding's few rows).
"""

from __future__ import annotations

import jax

from t5forge.errors import ConfigError
from t5forge.models import native_products
from t5forge.models.layers import stack_projections
from t5forge.models.quantized import Int8Kernel, pack_kernels, quantize_kernel
from t5forge.models.transposed import TransposedKernel, transpose_kernels, transposes_here

WEIGHTS_DTYPES = ("float32", "bfloat16", "int8")


def with_weights_dtype(params: dict, weights_dtype) -> dict:
    """`params` with every Dense kernel stored in `weights_dtype` (one of WEIGHTS_DTYPES)."""
    try:
        name = jax.numpy.dtype(weights_dtype).name
    except TypeError:
        name = None
    if name not in WEIGHTS_DTYPES:
        raise ConfigError(
            f"weights_dtype={weights_dtype!r} is not supported; use one of "
            f"{', '.join(WEIGHTS_DTYPES)}"
        )

    def convert(path, leaf):
        keys = [getattr(key, "key", None) for key in path]
        if isinstance(leaf, (Int8Kernel, TransposedKernel)):
            stored = "int8" if isinstance(leaf, Int8Kernel) else "bfloat16"
            if name != stored:
                raise ConfigError(
                    f"the Dense kernels are already {stored} and cannot become {name} again; "
                    f"load the checkpoint again with weights_dtype={name!r}"
                )
            return leaf
        if keys[-1] != "kernel" or "router" in keys:
            return leaf
        if name == "int8":
            # An expert kernel is [experts, (layers,) in, out]; a Dense kernel [in, ...].
            return quantize_kernel(leaf, contracting_axis=-2 if "expert" in keys else 0)
        return leaf.astype(name)

    converted = jax.tree_util.tree_map_with_path(
        convert, params, is_leaf=lambda leaf: isinstance(leaf, (Int8Kernel, TransposedKernel))
    )
    if name == "int8" and native_products.int8_products_here():
        return pack_kernels(stack_projections(converted))
    if name == "bfloat16" and transposes_here():
        return transpose_kernels(stack_projections(converted))
    return converted


def is_int8(params) -> bool:
    """Whether any kernel of `params` is an Int8Kernel (weights_dtype='int8')."""
    leaves = jax.tree.leaves(params, is_leaf=lambda leaf: isinstance(leaf, Int8Kernel))
    return any(isinstance(leaf, Int8Kernel) for leaf in leaves)
