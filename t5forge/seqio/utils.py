"""`seqio.utils`: the helpers task modules call (map_over_dataset, the TFDS data-dir
override, the global cache dirs)."""

from __future__ import annotations

from collections.abc import Callable

from t5forge.data.cache.search_dirs import (
    add_global_cache_dirs,
    get_global_cache_dirs,
    set_global_cache_dirs,
)
from t5forge.data.preprocessors.framework import ExamplePreprocessor, Preprocessor
from t5forge.errors import ConfigError

__all__ = [
    "add_global_cache_dirs",
    "get_global_cache_dirs",
    "map_over_dataset",
    "set_global_cache_dirs",
    "set_tfds_data_dir_override",
]


def map_over_dataset(
    fn: Callable | None = None, *, num_seeds: int | None = None, num_parallel_calls=None
):
    """SeqIO's decorator that makes `fn(example, **kw)` a per-example step.

    SeqIO hands every preprocessor the whole dataset unless this decorator says the function
    works on one example; t5forge keeps that rule (seqio.Task refuses an undecorated function)
    and returns the function as t5forge's per-example step, still callable on one example.
    `num_parallel_calls` is accepted and left to grain's workers. A per-example function that
    needs randomness takes `(example, rng)` (a numpy Generator) instead of `num_seeds` seeds.
    """
    if num_seeds is not None:
        raise ConfigError(
            "map_over_dataset(num_seeds=...) is not supported; write the "
            "function as fn(example, rng) with rng a numpy Generator"
        )
    return _per_example(fn) if fn is not None else _per_example


def _per_example(fn: Callable) -> Preprocessor:
    return fn if isinstance(fn, Preprocessor) else ExamplePreprocessor(fn)


def set_tfds_data_dir_override(tfds_data_dir: str | None) -> None:
    """Where every TfdsDataSource looks for prepared datasets (T5X's --tfds_data_dir calls
    it; it wins over a task's own tfds_data_dir, as in SeqIO); None undoes it."""
    from t5forge.data.sources import tfds

    tfds.set_tfds_data_dir_override(tfds_data_dir)
