"""Mixtures, and the registries that name tasks and mixtures.

A Mixture samples its tasks by rate with a per-element RNG, so it is as deterministic and
checkpointable as a Task. The registries live beside it because the two need each other: a
Mixture names its tasks (and sub-mixtures) through them, and `MixtureRegistry.add(name, ...)`
builds a Mixture.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import grain
import numpy as np

from t5forge.data.grain_ops.adapters import MixtureDataset
from t5forge.data.providers.task import DatasetProvider, Feature, KeepFeatures, Task, task_seed
from t5forge.errors import DataError

# ---------------------------------------------------------------- Mixture


def mixing_rate_num_examples(
    task: Task,
    maximum: float | None = None,
    scale: float = 1.0,
    temperature: float = 1.0,
    split: str = "train",
) -> float:
    """Rate proportional to the task's size: (min(n * scale, maximum)) ** (1 / temperature)."""
    n = task.num_input_examples(split)
    if n is None:
        raise DataError(
            f"task {task.name!r} does not know its {split!r} size; give the "
            "mixture a fixed rate for it"
        )
    rate = n * scale
    if maximum is not None:
        rate = min(rate, maximum)
    if temperature != 1.0:
        rate = rate ** (1.0 / temperature)
    return float(rate)


class Mixture(DatasetProvider):
    """Several tasks sampled by rate: fixed numbers or callables `rate(task) -> float`."""

    def __init__(
        self,
        name: str,
        tasks_and_rates: Sequence[Any],
        default_rate: float | Callable[[Task], float] | None = None,
    ):
        self.name = name
        self._rates: dict[str, float | Callable] = {}
        self._tasks: dict[str, Task] = {}
        for entry in tasks_and_rates:
            item, rate = entry if isinstance(entry, tuple) else (entry, default_rate)
            if rate is None:
                raise DataError(
                    f"mixture {name!r}: no rate for {getattr(item, 'name', item)!r};"
                    " give (task, rate) pairs or a default_rate"
                )
            resolved = get_mixture_or_task(item) if isinstance(item, str) else item
            for task in resolved.tasks:
                sub_rate = rate
                if isinstance(resolved, Mixture):
                    share = resolved.get_rate(task) / resolved.total_rate
                    sub_rate = _ScaledRate(rate, share)
                self._tasks[task.name] = task
                self._rates[task.name] = sub_rate
        if not self._tasks:
            raise DataError(f"mixture {name!r} has no tasks")
        if self.total_rate <= 0:
            raise DataError(f"mixture {name!r}: every rate is zero")
        first = next(iter(self._tasks.values()))
        for task in self._tasks.values():
            if set(task.output_features) != set(first.output_features):
                raise DataError(
                    f"mixture {name!r}: task {task.name!r} has features "
                    f"{sorted(task.output_features)}, {first.name!r} has "
                    f"{sorted(first.output_features)}; they must match"
                )

    def __repr__(self):
        return f"Mixture({self.name!r}, tasks={list(self._tasks)})"

    @property
    def tasks(self) -> list[Task]:
        return list(self._tasks.values())

    @property
    def output_features(self) -> dict[str, Feature]:
        return self.tasks[0].output_features

    @property
    def splits(self) -> tuple[str, ...]:
        first, *rest = self.tasks
        return tuple(s for s in first.splits if all(s in t.splits for t in rest))

    def get_rate(self, task: Task) -> float:
        rate = self._rates[task.name]
        return float(rate(task) if callable(rate) else rate)

    @property
    def total_rate(self) -> float:
        return sum(self.get_rate(t) for t in self.tasks)

    def num_input_examples(self, split: str) -> int | None:
        counts = [t.num_input_examples(split) for t in self.tasks]
        return None if None in counts else sum(counts)

    def get_dataset(
        self,
        split: str,
        *,
        sequence_length: Mapping[str, int] | None = None,
        shuffle: bool = True,
        seed: int | None = None,
        shard_index: int = 0,
        num_shards: int = 1,
        num_epochs: int | None = 1,
        use_cached: bool = False,
    ) -> grain.IterDataset:
        """Examples sampled from the tasks by normalized rate, deterministic for a seed.

        Stops when a sampled task runs out; pass num_epochs=None for training.
        """
        tasks = [t for t in self.tasks if self.get_rate(t) > 0]
        rates = np.asarray([self.get_rate(t) for t in tasks], dtype=np.float64)
        keep = KeepFeatures(self.output_features)
        parents = [
            t.get_dataset(
                split,
                sequence_length=sequence_length,
                shuffle=shuffle,
                seed=seed,
                shard_index=shard_index,
                num_shards=num_shards,
                num_epochs=num_epochs,
                use_cached=use_cached,
            ).map(keep)
            for t in tasks
        ]
        return MixtureDataset(parents, rates / rates.sum(), task_seed(self.name, seed))


class _ScaledRate:
    """A sub-mixture task's rate: the parent rate times the task's share inside it."""

    def __init__(self, rate, share):
        self.rate, self.share = rate, share

    def __call__(self, task):
        rate = self.rate(task) if callable(self.rate) else self.rate
        return rate * self.share


# ---------------------------------------------------------------- registries


class _Registry:
    """Name -> object, with helpful errors (close names) for typos."""

    kind = "item"
    _items: dict[str, Any]

    @classmethod
    def names(cls) -> list[str]:
        return sorted(cls._items)

    @classmethod
    def remove(cls, name: str) -> None:
        cls._items.pop(name, None)

    @classmethod
    def _add(cls, item) -> Any:
        if item.name in TaskRegistry._items or item.name in MixtureRegistry._items:
            raise DataError(
                f"{item.name!r} is already registered; call "
                f"{cls.__name__}.remove({item.name!r}) first to replace it"
            )
        cls._items[item.name] = item
        return item

    @classmethod
    def get(cls, name: str):
        if name not in cls._items:
            raise DataError(_unknown_message(name, cls.kind, cls.names()))
        return cls._items[name]


class TaskRegistry(_Registry):
    """Global task registry: `TaskRegistry.add(Task(...))` or `add(name, source, ...)`."""

    kind = "task"
    _items: dict[str, Task] = {}

    @classmethod
    def add(cls, task_or_name: Task | str, *args, **kwargs) -> Task:
        task = (
            task_or_name if isinstance(task_or_name, Task) else Task(task_or_name, *args, **kwargs)
        )
        return cls._add(task)


class MixtureRegistry(_Registry):
    """Global mixture registry: `MixtureRegistry.add(name, [(task, rate), ...])`."""

    kind = "mixture"
    _items: dict[str, Mixture] = {}

    @classmethod
    def add(cls, mixture_or_name: Mixture | str, *args, **kwargs) -> Mixture:
        mixture = (
            mixture_or_name
            if isinstance(mixture_or_name, Mixture)
            else Mixture(mixture_or_name, *args, **kwargs)
        )
        return cls._add(mixture)


def _unknown_message(name: str, kind: str, known: Sequence[str]) -> str:
    close = difflib.get_close_matches(name, known, n=5, cutoff=0.6)
    hint = f"did you mean {', '.join(close)}?" if close else f"{len(known)} registered"
    return (
        f"unknown {kind} {name!r}; {hint} (see `t5forge tasks list`; import the module "
        "that registers it with --module_import)"
    )


def get_mixture_or_task(name: str | DatasetProvider) -> DatasetProvider:
    """Looks a name up among mixtures, then tasks; unknown names list the close ones."""
    if isinstance(name, DatasetProvider):
        return name
    if name in MixtureRegistry._items:
        return MixtureRegistry._items[name]
    if name in TaskRegistry._items:
        return TaskRegistry._items[name]
    known = TaskRegistry.names() + MixtureRegistry.names()
    raise DataError(_unknown_message(name, "task or mixture", known))
