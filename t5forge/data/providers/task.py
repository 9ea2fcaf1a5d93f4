"""Tasks: named recipes from raw data to model features.

A Task ties a source, a list of preprocessors and the output features (with their
vocabularies) under a name that training, evaluation, caching and the CLI all share. Its
`get_dataset` is a grain pipeline that is deterministic for a seed (each task derives its
own seed from md5(task name) + the base seed, as seqio does) and whose iterator state
restores exactly. A random-access split is shuffled whole by index; a streaming one as SeqIO
shuffles it (data/grain_ops/shuffle_buffer.py: file order per epoch, then a `shuffle_buffer_size`
buffer). Mixtures of tasks and the registries that name both are in mixture.py.
"""

from __future__ import annotations

import abc
import collections
import dataclasses
import hashlib
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import grain
import numpy as np

from t5forge.data.cache.search_dirs import get_global_cache_dirs
from t5forge.data.grain_ops.adapters import IterableSplitDataset
from t5forge.data.grain_ops.regroup import READ_OPTIONS
from t5forge.data.grain_ops.shuffle_buffer import (
    SHUFFLE_BUFFER_SIZE,
    EpochShuffledFiles,
    ShuffleBufferDataset,
    derived_seed,
    shuffles_files,
)
from t5forge.data.preprocessors.framework import (
    CacheDatasetPlaceholder,
    PipelineContext,
    Preprocessor,
    as_preprocessor,
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


class KeepFeatures:
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
            from t5forge.data.cache.store import CachedSource

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
