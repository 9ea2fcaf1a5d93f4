"""Tasks and mixtures: named, registered recipes from raw data to model features.

A Task ties a source, a list of preprocessors and the output features (with their
vocabularies) under a name that training, evaluation, caching and the CLI all share. Its
`get_dataset` is a grain pipeline that is deterministic for a seed (each task derives its
own seed from md5(task name) + the base seed, as seqio does) and whose iterator state
restores exactly. A random-access split is shuffled whole by index; a streaming one as SeqIO
shuffles it (data/shuffle_buffer.py: file order per epoch, then a `shuffle_buffer_size`
buffer). A Mixture samples its tasks by rate with a per-element RNG, so it is just
as deterministic and checkpointable.
"""

from __future__ import annotations

import abc
import collections
import dataclasses
import difflib
import hashlib
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import grain
import numpy as np

from t5forge.data.cache_dirs import get_global_cache_dirs
from t5forge.data.grain_adapters import IterableSplitDataset, MixtureDataset
from t5forge.data.preprocessor_framework import (
    CacheDatasetPlaceholder,
    PipelineContext,
    Preprocessor,
    as_preprocessor,
)
from t5forge.data.regroup import READ_OPTIONS
from t5forge.data.shuffle_buffer import (
    SHUFFLE_BUFFER_SIZE,
    EpochShuffledFiles,
    ShuffleBufferDataset,
    derived_seed,
    shuffles_files,
)
from t5forge.data.sources import DataSource, is_random_access
from t5forge.data.vocabularies import Vocabulary
from t5forge.errors import DataError
from t5forge.user_code import described, raised_in_user_code


@dataclasses.dataclass(frozen=True)
class Feature:
    """One model feature: its vocabulary, whether EOS ends it, and whether tasks must give it."""

    vocabulary: Vocabulary
    add_eos: bool = True
    required: bool = True
    dtype: str = "int32"


# ---------------------------------------------------------------- seeds


def task_seed(task_name: str, seed: int | None) -> int:
    """seqio's per-task seed: md5(task name) + base seed, so tasks in a mixture differ."""
    digest = int(hashlib.md5(task_name.encode("utf-8")).hexdigest(), 16)
    return (digest + int(seed or 0)) % 2**32


def _step_seed(base_seed: int, step_index: int) -> int:
    return int(np.random.SeedSequence([base_seed, step_index]).generate_state(1)[0])


# ---------------------------------------------------------------- final validation


class _FinalizeExample:
    """Checks required features, casts token features to their dtype, trims to length."""

    def __init__(self, task_name, output_features, sequence_length):
        self.task_name, self.output_features = task_name, output_features
        self.sequence_length = sequence_length

    def __call__(self, example):
        out = dict(example)
        for name, feature in self.output_features.items():
            if name not in out:
                if feature.required:
                    raise DataError(
                        f"task {self.task_name!r}: example has no feature {name!r} (has: "
                        f"{', '.join(sorted(out)) or 'nothing'}); add a preprocessor that "
                        f"produces it (e.g. rekey) or declare Feature(required=False)"
                    )
                continue
            if isinstance(out[name], str):
                raise DataError(
                    f"task {self.task_name!r}: feature {name!r} is still text; add "
                    "the tokenize preprocessor"
                )
            tokens = np.asarray(out[name], dtype=feature.dtype)
            if self.sequence_length and self.sequence_length.get(name) is not None:
                tokens = tokens[: self.sequence_length[name]]
            out[name] = tokens
        return out


class _KeepFeatures:
    """Drops everything but the given features (a mixture's tasks must yield one structure)."""

    def __init__(self, names):
        self.names = tuple(names)

    def __call__(self, example):
        return {k: example[k] for k in self.names if k in example}


# ---------------------------------------------------------------- Task


def _check_buffer_size(task_name: str, size: int | None) -> None:
    if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 1):
        raise DataError(
            f"task {task_name!r}: shuffle_buffer_size must be a whole number >= 1 or None, "
            f"got {size!r}"
        )


_NAME_PATTERN = re.compile(r"^[\w.:/-]+$")


class OutputFeatures(dict):
    """A task's output features; asking for one it lacks (the model commands read `targets`,
    whose vocabulary decodes the model's output) is one line naming the task, not a KeyError
    from deep inside a command."""

    def __init__(self, task_name: str, features: Mapping[str, Feature]):
        super().__init__(features)
        self.task_name = task_name

    def __missing__(self, name: str):
        raise DataError(
            f"task {self.task_name!r} has no output feature {name!r} (it has "
            f"{', '.join(map(repr, self)) or 'none'}); add {name!r}: Feature(vocabulary) to its "
            "output_features"
        )


class DatasetProvider(abc.ABC):
    """What training, evaluation and caching need of a Task or a Mixture (SeqIO's
    DatasetProviderBase): a name, output features, its tasks, its splits and their sizes, and
    a deterministic, checkpointable dataset per split."""

    name: str
    output_features: dict[str, Feature]

    @property
    @abc.abstractmethod
    def tasks(self) -> list[Task]:
        """The tasks behind this provider ([self] for a Task)."""

    @property
    @abc.abstractmethod
    def splits(self) -> tuple[str, ...]:
        """The split names every task of this provider has."""

    @abc.abstractmethod
    def num_input_examples(self, split: str) -> int | None:
        """Raw examples in a split (before preprocessing); None when unknown."""

    @abc.abstractmethod
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
        """The preprocessed split as a grain IterDataset."""


class Task(DatasetProvider):
    """A named recipe: source -> preprocessors -> output features (+ metrics for eval).

    `single_token_labels` names a classification task's complete label set when each label
    is one target token; evaluation and `t5forge infer` then pick the best label on device
    (the model's method 'labels') instead of decoding.

    `shuffle_buffer_size` (SeqIO's argument and default) is the buffer a streaming split's
    examples pass when shuffled; None forbids shuffling such a split, as in SeqIO. A
    random-access split is shuffled whole and does not use it.

    `dropped_example_counts` counts, per preprocessor, the examples it dropped (returned
    None) in this process; grain worker processes keep their own counts.
    """

    def __init__(
        self,
        name: str,
        source: DataSource,
        preprocessors: Sequence[Any] = (),
        output_features: Mapping[str, Feature] | None = None,
        postprocess_fn: Callable | None = None,
        metric_fns: Sequence[Callable] = (),
        score_metric_fns: Sequence[Callable] = (),
        single_token_labels: Sequence[str] = (),
        shuffle_buffer_size: int | None = SHUFFLE_BUFFER_SIZE,
    ):
        if not isinstance(name, str) or not _NAME_PATTERN.match(name):
            raise DataError(f"task name {name!r} must be letters, digits and _ . : / - only")
        _check_buffer_size(name, shuffle_buffer_size)
        if not output_features:
            raise DataError(
                f"task {name!r} needs output_features, e.g. "
                "{'inputs': Feature(vocab), 'targets': Feature(vocab)}"
            )
        for feature_name, feature in output_features.items():
            if not isinstance(feature, Feature):
                raise DataError(
                    f"task {name!r}: output feature {feature_name!r} must be a "
                    f"Feature, got {type(feature).__name__}"
                )
        self.name = name
        self.source = source
        self.preprocessors: tuple[Preprocessor | CacheDatasetPlaceholder, ...] = tuple(
            as_preprocessor(p) for p in preprocessors
        )
        placeholders = [
            i for i, p in enumerate(self.preprocessors) if isinstance(p, CacheDatasetPlaceholder)
        ]
        if len(placeholders) > 1:
            raise DataError(
                f"task {name!r} has {len(placeholders)} CacheDatasetPlaceholders; keep one"
            )
        self._cache_index = placeholders[0] if placeholders else len(self.preprocessors)
        self.output_features = OutputFeatures(name, output_features)
        self.postprocess_fn = postprocess_fn
        self.metric_fns = tuple(metric_fns)
        self.score_metric_fns = tuple(score_metric_fns)
        self.single_token_labels = tuple(single_token_labels)
        self.shuffle_buffer_size = shuffle_buffer_size
        self.dropped_example_counts: collections.Counter = collections.Counter()

    def __repr__(self):
        return f"Task({self.name!r}, source={self.source!r})"

    @property
    def tasks(self) -> list[Task]:
        """[self], so callers can treat tasks and mixtures alike."""
        return [self]

    @property
    def splits(self) -> tuple[str, ...]:
        return tuple(self.source.split_names)

    def num_input_examples(self, split: str) -> int | None:
        """Raw examples in a split (before preprocessing); None when the source cannot tell."""
        return self.source.num_examples(split)

    def postprocess(self, text: str, example: Mapping | None = None, is_target: bool = False):
        """Applies postprocess_fn (if any) to decoded text, as evaluation does."""
        if self.postprocess_fn is None:
            return text
        try:
            return self.postprocess_fn(text, example=example, is_target=is_target)
        except Exception as e:
            at = raised_in_user_code(e)
            if at is None:
                raise
            name = getattr(self.postprocess_fn, "__name__", type(self.postprocess_fn).__name__)
            raise DataError(
                f"task {self.name!r}, postprocess_fn {name} raised {described(e)} ({at})"
            ) from None

    def label_token_ids(self) -> tuple[int, ...]:
        """The target token id of each of `single_token_labels` (empty when it has none).

        A task that declares its complete label set this way is predicted by scoring just
        these tokens (one decoder step) instead of decoding; every label must therefore be
        exactly one token of the targets vocabulary.
        """
        vocabulary = self.output_features["targets"].vocabulary
        ids = []
        for label in self.single_token_labels:
            tokens = vocabulary.encode(label)
            if len(tokens) != 1:
                raise DataError(
                    f"task {self.name!r}: label {label!r} is {len(tokens)} tokens {tokens} in "
                    "the targets vocabulary, not one; train the vocabulary with the label as a "
                    "piece, or drop single_token_labels and decode (or rank-classify) instead"
                )
            ids.append(int(tokens[0]))
        return tuple(ids)

    @property
    def cached_preprocessors(self) -> tuple[Preprocessor, ...]:
        """Steps whose output `t5forge cache-tasks` stores (all of them without a placeholder)."""
        return self.preprocessors[: self._cache_index]

    @property
    def uncached_preprocessors(self) -> tuple[Preprocessor, ...]:
        """Steps run on top of a cache (after the placeholder)."""
        return self.preprocessors[self._cache_index + 1 :]

    def _check_sharding(self, shard_index: int, num_shards: int) -> None:
        if num_shards < 1 or not 0 <= shard_index < num_shards:
            raise DataError(
                f"task {self.name!r}: shard_index {shard_index} must be in "
                f"[0, num_shards={num_shards})"
            )

    def _raw_dataset(
        self, split, *, shuffle, seed, shard_index, num_shards, num_epochs, use_cached
    ):
        if use_cached:
            from t5forge.data.cache import CachedSource

            data = CachedSource(self.name, split, get_global_cache_dirs())
            where = f"cache of task {self.name!r} split {split!r}"
        else:
            if split not in self.splits:
                raise DataError(
                    f"task {self.name!r} has no split {split!r}; splits: {', '.join(self.splits)}"
                )
            data = self.source.split(split)
            where = f"task {self.name!r} split {split!r}"
        if not is_random_access(data):
            if shuffle and not use_cached and shuffles_files(self.source):
                data = EpochShuffledFiles(self.source, split, seed)
            return IterableSplitDataset(data, shard_index, num_shards, num_epochs, where)
        if len(data) == 0:
            raise DataError(f"{where} is empty; check the data files")
        ds = grain.MapDataset.source(data)
        if num_shards > 1:
            if len(data) < num_shards:
                raise DataError(
                    f"{where} has {len(data)} examples, fewer than the "
                    f"{num_shards} shards asked for; use fewer shards"
                )
            ds = ds[shard_index::num_shards]
        if shuffle:
            ds = ds.shuffle(seed=seed)
        if num_epochs != 1:
            ds = ds.repeat(num_epochs)
        return ds

    def _apply(self, ds, steps, first_step_index, base_seed, sequence_length):
        context = PipelineContext(
            self.name, self.output_features, sequence_length, base_seed, self.dropped_example_counts
        )
        for offset, step in enumerate(steps):
            ds = step.apply(ds, context, _step_seed(base_seed, first_step_index + offset))
        return ds

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
        shuffle_buffer_size: int | None = None,
    ) -> grain.IterDataset:
        """The preprocessed split as a grain IterDataset (checkpointable iterator).

        seed None means 0: runs are reproducible unless a different seed is asked for.
        num_epochs None repeats forever. With use_cached the examples come from the cache
        written by `t5forge cache-tasks` and only the steps after the placeholder run.
        A random-access split shuffles by index; a streaming one reads its files in a
        seeded order per epoch and passes a buffer of `shuffle_buffer_size` (None: the
        task's) after the preprocessors, as SeqIO does.
        """
        self._check_sharding(shard_index, num_shards)
        _check_buffer_size(self.name, shuffle_buffer_size)
        base_seed = task_seed(self.name, seed)
        ds = self._raw_dataset(
            split,
            shuffle=shuffle,
            seed=base_seed,
            shard_index=shard_index,
            num_shards=num_shards,
            num_epochs=num_epochs,
            use_cached=use_cached,
        )
        streaming = isinstance(ds, IterableSplitDataset)
        if use_cached:
            ds = self._apply(
                ds, self.uncached_preprocessors, self._cache_index + 1, base_seed, sequence_length
            )
        else:
            steps = [p for p in self.preprocessors if not isinstance(p, CacheDatasetPlaceholder)]
            ds = self._apply(ds, steps, 0, base_seed, sequence_length)
        ds = ds.map(_FinalizeExample(self.name, self.output_features, sequence_length))
        if isinstance(ds, grain.MapDataset):
            ds = ds.to_iter_dataset(READ_OPTIONS)
        if shuffle and streaming:
            ds = self._shuffle_buffer(ds, shuffle_buffer_size, base_seed)
        return ds

    def _shuffle_buffer(self, ds, shuffle_buffer_size, base_seed):
        size = shuffle_buffer_size or self.shuffle_buffer_size
        if size is None:
            raise DataError(
                f"task {self.name!r} has shuffle_buffer_size=None, which forbids shuffling "
                "its streaming split; give the Task a shuffle_buffer_size (SeqIO's default "
                "is 1000) or read it with shuffle=False"
            )
        return ShuffleBufferDataset(ds, size, derived_seed(base_seed, 2))

    def cached_steps_dataset(
        self, split: str, shard_index: int = 0, num_shards: int = 1, seed: int = 0
    ) -> grain.MapDataset | grain.IterDataset:
        """The cached steps' unshuffled, single-epoch output, not yet an iterator: a
        MapDataset when every cached step keeps random access, so any index range of it can
        be computed on its own (how cache-tasks on Beam splits the work). Their random steps
        draw from `seed` as a run with that seed does (SeqIO's cache_tasks --base_seed): a
        cache written with seed N, read in order, is what an uncached run with seed N reads
        in order (shuffled, an uncached run draws after shuffling, a cache drew before)."""
        self._check_sharding(shard_index, num_shards)
        base_seed = task_seed(self.name, seed)
        ds = self._raw_dataset(
            split,
            shuffle=False,
            seed=base_seed,
            shard_index=shard_index,
            num_shards=num_shards,
            num_epochs=1,
            use_cached=False,
        )
        return self._apply(ds, self.cached_preprocessors, 0, base_seed, None)

    def get_uncached_examples(
        self, split: str, shard_index: int = 0, num_shards: int = 1, seed: int = 0
    ) -> grain.IterDataset:
        """The unshuffled, single-epoch output of the cached steps (what cache-tasks writes)."""
        ds = self.cached_steps_dataset(split, shard_index, num_shards, seed)
        if isinstance(ds, grain.MapDataset):
            ds = ds.to_iter_dataset(READ_OPTIONS)
        return ds


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
        keep = _KeepFeatures(self.output_features)
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
