"""t5forge: pretrain, fine-tune, evaluate, score and serve T5-family models on JAX."""

import importlib

from t5forge.host_memory import keep_freed_memory
from t5forge.version import __version__

# Before jax's worker threads allocate for the first time (see t5forge.host_memory).
keep_freed_memory()

# The library functions behind the commands, imported on first use so `import t5forge` stays
# light.
_LAZY_FUNCTIONS = {
    "train": "t5forge.run.train",
    "evaluate": "t5forge.run.evaluate",
    "infer": "t5forge.run.infer",
    "convert": "t5forge.run.convert",
}


def load(path, config=None, weights_dtype=None, dtype=None):
    """Loads a model from a t5forge, T5X or Hugging Face checkpoint (see t5forge.api.load)."""
    from t5forge.api import load as _load

    return _load(path, config=config, weights_dtype=weights_dtype, dtype=dtype)


def serve(checkpoint, **options):
    """Serves a model over HTTP with dynamic batching until SIGTERM (see t5forge.serving.serve)."""
    from t5forge.serving import serve as _serve

    return _serve(checkpoint, **options)


def __getattr__(name):
    """`t5forge.train`, `t5forge.evaluate`, `t5forge.infer` (see t5forge.run) and
    `t5forge.convert` (see t5forge.run.convert)."""
    if name in _LAZY_FUNCTIONS:
        return getattr(importlib.import_module(_LAZY_FUNCTIONS[name]), name)
    raise AttributeError(f"module 't5forge' has no attribute {name!r}")


__all__ = ["convert", "evaluate", "infer", "load", "serve", "train", "__version__"]
