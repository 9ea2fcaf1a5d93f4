"""The dtype a model's matmul weights are stored in for inference (`load(weights_dtype=...)`).

Only the Dense kernels change: layers.weight_matmul multiplies a kernel stored narrower than
the compute dtype in its own dtype, so bfloat16 kernels read half the bytes per decoding step,
while embeddings, norms and relative-position tables keep float32.
"""

from __future__ import annotations

import jax

from t5forge.errors import ConfigError

WEIGHTS_DTYPES = ("float32", "bfloat16")


def with_weights_dtype(params: dict, weights_dtype) -> dict:
    """`params` with every Dense kernel cast to `weights_dtype` (one of WEIGHTS_DTYPES)."""
    try:
        name = jax.numpy.dtype(weights_dtype).name
    except TypeError:
        name = None
    if name not in WEIGHTS_DTYPES:
        raise ConfigError(
            f"weights_dtype={weights_dtype!r} is not supported; use one of "
            f"{', '.join(WEIGHTS_DTYPES)}"
        )

    def cast(path, leaf):
        is_kernel = getattr(path[-1], "key", None) == "kernel"
        return leaf.astype(name) if is_kernel else leaf

    return jax.tree_util.tree_map_with_path(cast, params)
