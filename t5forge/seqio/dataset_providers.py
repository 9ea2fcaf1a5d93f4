"""SeqIO's tasks, mixtures, registries, features and data sources, in SeqIO's signatures.

Each class is t5forge's (t5forge.data.providers / sources) with SeqIO's argument names and order;
what SeqIO has and t5forge does not do is one error naming the argument and what to write
instead. Sources that read TensorFlow formats (TFDS directories, TFRecord files of
tf.Example) come from t5forge.data's readers, which need no TensorFlow.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from t5forge.data.grain_ops.shuffle_buffer import SHUFFLE_BUFFER_SIZE
from t5forge.data.preprocessors import framework as _framework
from t5forge.data.providers import mixture as _mixture
from t5forge.data.providers import task as _task
from t5forge.data.sources.function import FunctionSource
from t5forge.data.sources.shard_info import ShardInfo
from t5forge.data.sources.text_files import TextLineSource
from t5forge.errors import ConfigError, DataError

# TensorFlow-free readers another module of t5forge.data provides, by SeqIO's name.
_READERS = {
    "TfdsDataSource": "t5forge.data.sources.tfds",
    "TFExampleDataSource": "t5forge.data.sources.files",
    "FileDataSource": "t5forge.data.sources.files",
}


def reader_class(name: str):
    """SeqIO's TFDS / TFRecord source classes, imported when first named."""
    return getattr(importlib.import_module(_READERS[name]), name)


def _numpy_dtype(dtype) -> str:
    """'int32' from a name, a numpy dtype, or a dtype of the tf stand-in (`tf.int32`)."""
    for candidate in (getattr(dtype, "as_numpy_dtype", None), getattr(dtype, "name", None), dtype):
        if candidate is None:
            continue
        try:
            return np.dtype(candidate).name
        except TypeError:
            continue
    raise ConfigError(f"Feature(dtype={dtype!r}) is not a dtype; use tf.int32 or 'int32'")


@dataclasses.dataclass(frozen=True)
class Feature(_task.Feature):
    """SeqIO's `Feature(vocabulary, add_eos=True, required=True, dtype=tf.int32, rank=1)`.

    Token features are 1-D sequences; rank 0 (a scalar per example) or rank 2 features are
    not model features t5forge's converters read.
    """

    rank: int = 1

    def __post_init__(self):
        object.__setattr__(self, "dtype", _numpy_dtype(self.dtype))
        if self.rank != 1:
            raise ConfigError(
                f"Feature(rank={self.rank}) is not supported: output features are token "
                "sequences (rank 1); keep other values as extra example fields"
            )


def _is_per_example_or_t5forge_step(step) -> bool:
    """What SeqIO does not hand the whole dataset: a step decorated with map_over_dataset
    (here: any t5forge Preprocessor, bound or not) and the cache placeholder."""
    if isinstance(step, functools.partial):
        step = step.func
    placeholder = _framework.CacheDatasetPlaceholder
    return isinstance(step, (_framework.Preprocessor, placeholder)) or (
        isinstance(step, type) and issubclass(step, placeholder)
    )


def _checked_preprocessors(task_name: str, preprocessors) -> list:
    """SeqIO calls an undecorated preprocessor with the whole tf.data dataset, whatever its
    parameters are named; t5forge has no tf.data, so such a step is refused here."""
    for step in preprocessors or ():
        fn = step.func if isinstance(step, functools.partial) else step
        if callable(fn) and not _is_per_example_or_t5forge_step(step):
            name = getattr(fn, "__name__", type(fn).__name__)
            raise DataError(
                f"task {task_name!r}: preprocessor {name} takes a tf.data dataset (SeqIO passes "
                "the whole dataset to a function not decorated with @seqio.map_over_dataset); "
                "write it per example as fn(example) -> example over a dict of numpy values "
                "and str, decorated with @seqio.map_over_dataset, or over grain datasets with "
                "@t5forge.data.preprocessors.dataset_preprocessor"
            )
    return list(preprocessors or ())


class Task(_task.Task):
    """SeqIO's `Task(name, source, output_features, preprocessors, postprocess_fn,
    metric_fns, ...)`; `shuffle_buffer_size` shuffles streaming splits as SeqIO does (a
    random-access split is shuffled whole by index), `metric_objs` (clu metrics) are not
    supported."""

    def __init__(
        self,
        name: str,
        source,
        output_features: Mapping[str, Feature],
        preprocessors: Sequence | None = None,
        postprocess_fn: Callable | None = None,
        metric_fns: Sequence[Callable] | None = None,
        metric_objs=None,
        shuffle_buffer_size: int | None = SHUFFLE_BUFFER_SIZE,
        source_info=None,
    ):
        if metric_objs:
            raise ConfigError(
                f"task {name!r}: metric_objs (clu metrics) are not supported; "
                "give metric_fns(targets, predictions) -> {name: value}"
            )
        super().__init__(
            name,
            source,
            _checked_preprocessors(name, preprocessors),
            output_features,
            postprocess_fn=postprocess_fn,
            metric_fns=metric_fns or (),
            shuffle_buffer_size=shuffle_buffer_size,
        )

    @property
    def postprocessor(self):
        """SeqIO's name for postprocess_fn."""
        return self.postprocess_fn


class TaskRegistry(_mixture.TaskRegistry):
    """SeqIO's registry: `TaskRegistry.add(name, source, output_features, preprocessors=...)`;
    tasks land in t5forge's one registry (`t5forge tasks list` shows them)."""

    @classmethod
    def add(
        cls,
        name: str,
        source=None,
        output_features=None,
        preprocessors=None,
        postprocess_fn=None,
        metric_fns=None,
        task_cls: type = Task,
        **kwargs,
    ) -> Task:
        task = task_cls(
            name,
            source,
            output_features,
            preprocessors=preprocessors,
            postprocess_fn=postprocess_fn,
            metric_fns=metric_fns,
            **kwargs,
        )
        return cls._add(task)

    @classmethod
    def add_provider(cls, name: str, provider) -> _task.Task:
        """Registers a Task built elsewhere under `name` (which must be its name)."""
        if provider.name != name:
            raise DataError(f"TaskRegistry.add_provider({name!r}): the task is {provider.name!r}")
        return cls._add(provider)

    @classmethod
    def reset(cls) -> None:
        """Forgets every task, the built-in ones included (tests use it)."""
        cls._items.clear()


class Mixture(_mixture.Mixture):
    """SeqIO's `Mixture(name, tasks, default_rate=None, sample_fn=..., source_info=None)`."""

    def __init__(self, name: str, tasks, default_rate=None, sample_fn=None, source_info=None):
        if sample_fn is not None:
            raise ConfigError(
                f"mixture {name!r}: sample_fn is not supported; t5forge samples tasks by "
                "rate per example (set the rates instead)"
            )
        super().__init__(name, tasks, default_rate)


class MixtureRegistry(_mixture.MixtureRegistry):
    """SeqIO's `MixtureRegistry.add(name, tasks, default_rate=None, mixture_cls=Mixture)`."""

    @classmethod
    def add(cls, name: str, tasks, default_rate=None, mixture_cls: type = Mixture, **kwargs):
        return cls._add(mixture_cls(name, tasks, default_rate, **kwargs))

    @classmethod
    def add_provider(cls, name: str, provider) -> _mixture.Mixture:
        """Registers a Mixture built elsewhere under `name` (which must be its name)."""
        if provider.name != name:
            raise DataError(
                f"MixtureRegistry.add_provider({name!r}): the mixture is {provider.name!r}"
            )
        return cls._add(provider)

    @classmethod
    def reset(cls) -> None:
        """Forgets every mixture."""
        cls._items.clear()


def mixing_rate_num_examples(
    task,
    maximum: float | None = None,
    scale: float = 1.0,
    temperature: float = 1.0,
    fallback_to_num_input_examples: bool = True,
    split: str = "train",
) -> float:
    """SeqIO's rate proportional to a task's size (t5forge counts input examples)."""
    return _mixture.mixing_rate_num_examples(task, maximum, scale, temperature, split)


class CacheDatasetPlaceholder(_framework.CacheDatasetPlaceholder):
    """SeqIO's `CacheDatasetPlaceholder(required=False)`; with `required=True` SeqIO refuses
    to run the task uncached, t5forge runs it either way."""

    def __init__(self, required: bool = False):
        self.required = required


class TextLineDataSource(TextLineSource):
    """SeqIO's `TextLineDataSource(split_to_filepattern)`: one example per line, as
    `{'text': line}` (SeqIO yields the bare string)."""

    def __init__(
        self,
        split_to_filepattern: Mapping[str, str | Sequence[str]],
        skip_header_lines: int = 0,
        num_input_examples=None,
        caching_permitted: bool = True,
        file_shuffle_buffer_size=None,
        cycle_length: int = 16,
        block_length: int = 16,
    ):
        if skip_header_lines:
            raise ConfigError(
                "TextLineDataSource(skip_header_lines=...) is not supported; "
                "drop header lines in a preprocessor (return None)"
            )
        super().__init__(split_to_filepattern)


def _call_dataset_fn(dataset_fn: Callable, split: str):
    return dataset_fn(split=split, shuffle_files=False)


class FunctionDataSource(FunctionSource):
    """SeqIO's `FunctionDataSource(dataset_fn, splits)`: `dataset_fn(split, shuffle_files)`
    returns examples (dicts) as a list or any iterable instead of a tf.data.Dataset."""

    def __init__(
        self,
        dataset_fn: Callable,
        splits: Sequence[str],
        num_input_examples: Mapping[str, int] | None = None,
        caching_permitted: bool = True,
    ):
        super().__init__(
            functools.partial(_call_dataset_fn, dataset_fn), splits, num_input_examples
        )


def get_mixture_or_task(task_or_mixture_name):
    """The registered mixture or task of that name (mixtures first, as SeqIO)."""
    return _mixture.get_mixture_or_task(task_or_mixture_name)


def maybe_get_mixture_or_task(task_or_mixture):
    """A Task or Mixture as it is, or the registered one of that name."""
    return _mixture.get_mixture_or_task(task_or_mixture)


def get_subtasks(task_or_mixture) -> list:
    """The tasks behind a task ([task]) or a mixture."""
    return list(_mixture.get_mixture_or_task(task_or_mixture).tasks)


def get_dataset(
    mixture_or_task_name,
    task_feature_lengths: Mapping[str, int],
    feature_converter,
    dataset_split: str = "train",
    use_cached: bool = False,
    shuffle: bool = False,
    num_epochs: int | None = 1,
    shard_info: ShardInfo | None = None,
    verbose: bool = True,
    seed: int | None = None,
    batch_size: int | None = None,
    trim_output_features: bool = True,
):
    """SeqIO's get_dataset: the task's examples converted to model features, as a grain
    IterDataset of dicts of numpy arrays (batched when batch_size is given)."""
    if not callable(getattr(feature_converter, "apply", None)):
        raise ConfigError(
            f"get_dataset needs a feature converter instance, got {feature_converter!r}; "
            "e.g. seqio.EncDecFeatureConverter(pack=False)"
        )
    provider = _mixture.get_mixture_or_task(mixture_or_task_name)
    shard = shard_info or ShardInfo(0, 1)
    ds = provider.get_dataset(
        dataset_split,
        sequence_length=task_feature_lengths if trim_output_features else None,
        shuffle=shuffle,
        seed=seed,
        shard_index=shard.index,
        num_shards=shard.num_shards,
        num_epochs=num_epochs,
        use_cached=use_cached,
    )
    ds = feature_converter.apply(ds, task_feature_lengths)
    return ds.batch(batch_size) if batch_size else ds
