"""SeqIO's flat namespace over t5forge's data layer: port a task module by changing one line.

    import seqio                  # before
    from t5forge import seqio     # after

`seqio.Task`, `TaskRegistry.add`, `Mixture`, `MixtureRegistry`, `Feature`, the vocabularies,
`TextLineDataSource`, `FunctionDataSource`, `preprocessors.*`, `CacheDatasetPlaceholder`,
`evaluation`, `metrics` and `map_over_dataset` take SeqIO's arguments in SeqIO's order where
t5forge does the same thing. What differs (no tf.data: preprocessors and data-source
functions work on Python dicts of numpy values, one example at a time) is listed in README
'Coming from T5X'. This is t5forge's own module; it is unrelated to the stand-in `seqio`
that T5X gin files see while gin parses them (t5forge.config.t5x_compat).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence

from t5forge.data import evaluation, metrics, preprocessors
from t5forge.data import preprocessor_framework as _framework
from t5forge.data import sources as _sources
from t5forge.data import tasks as _tasks
from t5forge.data import vocabularies as _vocabularies
from t5forge.data.evaluation import Evaluator
from t5forge.data.feature_converters import (
    DecoderFeatureConverter,
    EncDecFeatureConverter,
    FeatureConverter,
    PrefixLMFeatureConverter,
)
from t5forge.data.tasks import (
    Feature,
    Mixture,
    MixtureRegistry,
    get_mixture_or_task,
)
from t5forge.data.vocabularies import ByteVocabulary, Vocabulary
from t5forge.errors import ConfigError

__all__ = [
    "ByteVocabulary",
    "CacheDatasetPlaceholder",
    "DecoderFeatureConverter",
    "EncDecFeatureConverter",
    "Evaluator",
    "Feature",
    "FeatureConverter",
    "FunctionDataSource",
    "Mixture",
    "MixtureRegistry",
    "PrefixLMFeatureConverter",
    "SentencePieceVocabulary",
    "Task",
    "TaskRegistry",
    "TextLineDataSource",
    "Vocabulary",
    "evaluation",
    "get_mixture_or_task",
    "map_over_dataset",
    "metrics",
    "preprocessors",
]

SHUFFLE_BUFFER_SIZE = 1000


class Task(_tasks.Task):
    """SeqIO's `Task(name, source, output_features, preprocessors, postprocess_fn,
    metric_fns, ...)`; `shuffle_buffer_size` has no effect (t5forge shuffles the whole split
    by index), `metric_objs` (clu metrics) are not supported."""

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
            preprocessors or (),
            output_features,
            postprocess_fn=postprocess_fn,
            metric_fns=metric_fns or (),
        )


class TaskRegistry(_tasks.TaskRegistry):
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


class SentencePieceVocabulary(_vocabularies.SentencePieceVocabulary):
    """SeqIO's signature: `SentencePieceVocabulary(sentencepiece_model_file, extra_ids=None)`."""

    def __init__(
        self,
        sentencepiece_model_file: str,
        extra_ids: int | None = None,
        normalizer_spec_overrides=None,
        reverse_extra_ids: bool = True,
        use_fast_tokenizer: bool = False,
    ):
        if normalizer_spec_overrides is not None:
            raise ConfigError(
                "normalizer_spec_overrides is not supported; train the "
                "vocabulary with the normalizer you need (t5forge vocab train)"
            )
        if not reverse_extra_ids:
            raise ConfigError(
                "reverse_extra_ids=False is not supported: <extra_id_0> is "
                "always the last id, as in T5"
            )
        super().__init__(sentencepiece_model_file, extra_ids or 0)


class CacheDatasetPlaceholder(_framework.CacheDatasetPlaceholder):
    """SeqIO's `CacheDatasetPlaceholder(required=False)`; with `required=True` SeqIO refuses
    to run the task uncached, t5forge runs it either way."""

    def __init__(self, required: bool = False):
        self.required = required


class TextLineDataSource(_sources.TextLineSource):
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


class FunctionDataSource(_sources.FunctionSource):
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
