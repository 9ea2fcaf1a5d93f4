"""The dtype a model's matmul weights are stored in for inference (`load(weights_dtype=...)`).

Only the Dense kernels change: layers.weight_matmul multiplies a kernel stored narrower than
the compute dtype in its own dtype, so bfloat16 kernels read half the bytes per decoding step,
while embeddings, norms and relative-position tables keep float32. A mixture of experts'
router keeps float32 too: Switch routes in float32 on purpose ("selective precision"), and a
narrower router could send tokens to other experts.
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
        keys = [getattr(key, "key", None) for key in path]
        narrowed = keys[-1] == "kernel" and "router" not in keys
        return leaf.astype(name) if narrowed else leaf

    return jax.tree_util.tree_map_with_path(cast, params)
