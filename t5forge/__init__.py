"""t5forge: pretrain, fine-tune, evaluate, score and serve T5-family models on JAX."""

__version__ = "0.1.0"


def load(path, config=None):
    """Loads a model from a t5forge, T5X or Hugging Face checkpoint (see t5forge.api.load)."""
    from t5forge.api import load as _load

    return _load(path, config=config)


__all__ = ["load", "__version__"]
