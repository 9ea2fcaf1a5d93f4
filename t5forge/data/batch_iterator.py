"""Batches for training and evaluation: task or mixture -> converted, batched int32 arrays.

`make_batch_iterator` is the one place that stacks the data pieces in the right order:
the task's sharded, shuffled examples -> optional worker processes -> feature converter
(packing) -> batching. Packing and batching run after the worker processes, so each
worker's output is a stream of examples and no partial batch is lost per worker (a grain
trap). The returned iterator's `get_state()` is a plain JSON-serialisable dict that a
checkpoint stores; `set_state()` continues with exactly the batches that would have come
next, whether the run is a task or a mixture, packed or not.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import grain
import numpy as np

from t5forge.data.feature_converters import MODEL_DTYPE, FeatureConverter
from t5forge.data.providers.mixture import Mixture, get_mixture_or_task
from t5forge.data.providers.task import Task
from t5forge.errors import ConfigError


def _json_safe(value: Any) -> Any:
    """grain states may hold numpy scalars and tuples; a checkpoint wants plain JSON."""
    return json.loads(json.dumps(value, default=lambda v: v.item() if hasattr(v, "item") else v))


def _allow_worker_processes() -> None:
    """grain workers read absl flags; an application without absl never parsed them."""
    from absl import flags

    if not flags.FLAGS.is_parsed():
        flags.FLAGS.mark_as_parsed()


class _PadBatch:
    """Fills a short final batch with all-padding rows (zero loss weight) to a full batch."""

    def __init__(self, padding_row: Mapping[str, np.ndarray], batch_size: int):
        self.padding_row = dict(padding_row)
        self.batch_size = batch_size

    def __call__(self, batch: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        missing = self.batch_size - len(next(iter(batch.values())))
        if not missing:
            return dict(batch)
        return {
            name: np.concatenate([values, np.tile(self.padding_row[name], (missing, 1))])
            for name, values in batch.items()
        }


def _as_model_arrays(batch: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {name: np.ascontiguousarray(values, dtype=MODEL_DTYPE) for name, values in batch.items()}


class BatchIterator:
    """Iterator over batches (dicts of int32 [batch, length]) with a resumable state."""

    def __init__(self, dataset: grain.IterDataset, description: str):
        self._iterator = iter(dataset)
        self.description = description

    def __iter__(self) -> BatchIterator:
        return self

    def __next__(self) -> dict[str, np.ndarray]:
        return next(self._iterator)

    def get_state(self) -> dict[str, Any]:
        """Where the stream is: JSON-serialisable, restored by `set_state`."""
        return _json_safe(self._iterator.get_state())

    def set_state(self, state: Mapping[str, Any]) -> None:
        self._iterator.set_state(dict(state))

    def close(self) -> None:
        """Stops worker processes (if any) now rather than at garbage collection."""
        close = getattr(self._iterator, "close", None)
        if close is not None:
            close()

    def __enter__(self) -> BatchIterator:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"BatchIterator({self.description})"


def make_batch_iterator(
    mixture_or_task: str | Task | Mixture,
    split: str,
    task_feature_lengths: Mapping[str, int],
    batch_size: int,
    converter: FeatureConverter,
    seed: int | None,
    shard_index: int = 0,
    num_shards: int = 1,
    shuffle: bool = True,
    num_epochs: int | None = None,
    use_cached: bool = False,
    worker_count: int = 0,
    drop_remainder: bool | None = None,
    prefetch_buffer_size: int = 0,
) -> BatchIterator:
    """Batches of model features for one process.

    batch_size is per process (global batch / num_shards); this process reads shard
    `shard_index` of `num_shards`. The last partial batch is dropped when
    `drop_remainder` (default: when shuffling, i.e. training) and otherwise padded with
    all-padding rows. `worker_count` > 0 preprocesses in that many processes (the batches
    are deterministic for a given worker count); `prefetch_buffer_size` > 0 prepares that
    many batches in a background thread.
    """
    if batch_size < 1:
        raise ConfigError(f"batch_size must be at least 1, got {batch_size}")
    if worker_count < 0:
        raise ConfigError(f"worker_count must be >= 0, got {worker_count}")
    source = get_mixture_or_task(mixture_or_task)
    dataset = source.get_dataset(
        split,
        sequence_length=dict(task_feature_lengths),
        shuffle=shuffle,
        seed=seed,
        shard_index=shard_index,
        num_shards=num_shards,
        num_epochs=num_epochs,
        use_cached=use_cached,
    )
    if worker_count:
        _allow_worker_processes()
        dataset = dataset.mp_prefetch(grain.MultiprocessingOptions(num_workers=worker_count))
    dataset = converter.apply(dataset, task_feature_lengths)
    drop = shuffle if drop_remainder is None else drop_remainder
    dataset = dataset.batch(batch_size, drop_remainder=drop)
    if not drop:
        dataset = dataset.map(_PadBatch(converter.padding_row(task_feature_lengths), batch_size))
    dataset = dataset.map(_as_model_arrays)
    if prefetch_buffer_size:
        dataset = grain.experimental.ThreadPrefetchIterDataset(
            dataset, prefetch_buffer_size=prefetch_buffer_size
        )
    description = (
        f"{source.name}:{split} batch {batch_size} shard {shard_index}/{num_shards} {converter!r}"
    )
    return BatchIterator(dataset, description)
