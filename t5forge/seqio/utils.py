"""`seqio.utils`: the helpers task modules call (map_over_dataset, the TFDS data-dir
override, the global cache dirs)."""

from __future__ import annotations

from collections.abc import Callable

from t5forge.data.cache_dirs import (
    add_global_cache_dirs,
    get_global_cache_dirs,
    set_global_cache_dirs,
)
from t5forge.errors import ConfigError

__all__ = [
    "add_global_cache_dirs",
    "get_global_cache_dirs",
    "map_over_dataset",
    "set_global_cache_dirs",
    "set_tfds_data_dir_override",
]


def map_over_dataset(fn: Callable | None = None, *, num_seeds: int | None = None):
    """SeqIO's decorator for a per-example function. t5forge applies plain per-example
    functions over the dataset itself, so the function is returned as it is; a per-example
    function that needs randomness takes `(example, rng)` (a numpy Generator) instead of
    `num_seeds` seeds."""
    if num_seeds is not None:
        raise ConfigError(
            "map_over_dataset(num_seeds=...) is not supported; write the "
            "function as fn(example, rng) with rng a numpy Generator"
        )
    return fn if fn is not None else (lambda f: f)


def set_tfds_data_dir_override(tfds_data_dir: str | None) -> None:
    """Where every TfdsDataSource looks for prepared datasets (T5X's --tfds_data_dir calls
    it; it wins over a task's own tfds_data_dir, as in SeqIO); None undoes it."""
    from t5forge.data import tfds

    tfds.set_tfds_data_dir_override(tfds_data_dir)
