"""`seqio.experimental`: the registry helpers T5's and users' task modules call."""

from __future__ import annotations

import inspect
from collections.abc import Mapping

from t5forge.data.preprocessors.framework import CacheDatasetPlaceholder, example_preprocessor
from t5forge.data.providers.mixture import TaskRegistry
from t5forge.data.providers.task import Task
from t5forge.data.providers.with_sentinels import add_task_with_sentinels
from t5forge.errors import DataError

__all__ = ["add_fully_cached_task", "add_task_with_sentinels", "fully_cached_name"]


def fully_cached_name(original_name: str, sequence_length: Mapping[str, int]) -> str:
    """SeqIO's name: `<task>_<feature prefix><length>_...` with the shortest unique prefixes
    ('inputs'/'targets' -> 'i'/'t')."""
    prefix_len = 0
    while len({feature[:prefix_len] for feature in sequence_length}) != len(sequence_length):
        prefix_len += 1
    suffix = "_".join(f"{f[:prefix_len]}{n}" for f, n in sequence_length.items())
    return f"{original_name}_{suffix}"


class _CheckLengths:
    """After a fully cached task's cache: refuses other lengths than those it was cut to."""

    def __init__(self, name: str, lengths: Mapping[str, int]):
        self.name, self.lengths = name, dict(lengths)

    def __call__(self, example, sequence_length=None):
        if sequence_length is not None and dict(sequence_length) != self.lengths:
            raise DataError(
                f"fully cached task {self.name!r} holds examples cut to {self.lengths}; "
                f"read it with those feature lengths, not {dict(sequence_length)}"
            )
        return example


def _with_fixed_lengths(step, lengths):
    """The step with sequence_length fixed (it runs before the cache, at caching time)."""
    if "sequence_length" in inspect.signature(step.fn).parameters:
        return step.bind(sequence_length=dict(lengths))
    return step


def add_fully_cached_task(
    task_name: str, sequence_length: Mapping[str, int], disallow_shuffling: bool = False
) -> Task:
    """Registers `<task>_<lengths>`: every step of the task runs before the cache, at these
    lengths, so `t5forge cache-tasks` stores final examples (SeqIO's experimental helper)."""
    task = TaskRegistry.get(task_name)
    name = fully_cached_name(task_name, sequence_length)
    if name in TaskRegistry.names():
        return TaskRegistry.get(name)
    steps = [
        _with_fixed_lengths(step, sequence_length)
        for step in task.preprocessors
        if not isinstance(step, CacheDatasetPlaceholder)
    ]
    check = example_preprocessor(_CheckLengths(name, sequence_length))
    return TaskRegistry.add(
        Task(
            name,
            task.source,
            [*steps, CacheDatasetPlaceholder(), check],
            task.output_features,
            postprocess_fn=task.postprocess_fn,
            metric_fns=task.metric_fns,
            score_metric_fns=task.score_metric_fns,
        )
    )
