"""SeqIO's namespace over t5forge's data layer: SeqIO task modules run on t5forge.

While t5forge imports a task module (its commands, or `t5forge.compat.stand_in_modules()`),
`import seqio` there is this package; written by hand, `from t5forge import seqio` is the
same. `Task`, `TaskRegistry`, `Mixture`, `MixtureRegistry`, `Feature`, the vocabularies, the
data sources (TextLine, Function, Tfds, TFExample, File), `preprocessors`, `utils`,
`experimental`, `loggers`, `evaluation`, `metrics`, the feature converters and `get_dataset`
take SeqIO's arguments in SeqIO's order where t5forge does the same thing. What differs: there is no tf.data, so
preprocessors and dataset functions work on Python dicts of numpy values and str, one example
at a time (docs/tasks-and-data.md, "SeqIO task modules: one changed line", lists the rest).
"""

from __future__ import annotations

from t5forge.data import evaluator as evaluation
from t5forge.data import metrics
from t5forge.data.evaluator import Evaluator
from t5forge.seqio import experimental, loggers, preprocessors, utils, vocabularies
from t5forge.seqio.dataset_providers import (
    SHUFFLE_BUFFER_SIZE,
    CacheDatasetPlaceholder,
    Feature,
    FunctionDataSource,
    Mixture,
    MixtureRegistry,
    ShardInfo,
    Task,
    TaskRegistry,
    TextLineDataSource,
    get_dataset,
    get_mixture_or_task,
    get_subtasks,
    maybe_get_mixture_or_task,
    mixing_rate_num_examples,
    reader_class,
)
from t5forge.seqio.feature_converters import (
    DecoderFeatureConverter,
    EncDecFeatureConverter,
    EncoderFeatureConverter,
    FeatureConverter,
    LMFeatureConverter,
    PassThroughFeatureConverter,
    PrefixLMFeatureConverter,
)
from t5forge.seqio.loggers import JSONLogger, Logger, PyLoggingLogger, TensorBoardLogger
from t5forge.seqio.utils import (
    add_global_cache_dirs,
    get_global_cache_dirs,
    map_over_dataset,
    set_global_cache_dirs,
    set_tfds_data_dir_override,
)
from t5forge.seqio.vocabularies import (
    PAD_ID,
    ByteVocabulary,
    PassThroughVocabulary,
    SentencePieceVocabulary,
    Vocabulary,
)

__all__ = [
    "PAD_ID",
    "SHUFFLE_BUFFER_SIZE",
    "ByteVocabulary",
    "CacheDatasetPlaceholder",
    "DecoderFeatureConverter",
    "EncDecFeatureConverter",
    "EncoderFeatureConverter",
    "Evaluator",
    "FeatureConverter",
    "FileDataSource",
    "Feature",
    "FunctionDataSource",
    "JSONLogger",
    "LMFeatureConverter",
    "Logger",
    "Mixture",
    "MixtureRegistry",
    "PassThroughFeatureConverter",
    "PassThroughVocabulary",
    "PrefixLMFeatureConverter",
    "PyLoggingLogger",
    "SentencePieceVocabulary",
    "ShardInfo",
    "TFExampleDataSource",
    "TensorBoardLogger",
    "Task",
    "TaskRegistry",
    "TextLineDataSource",
    "TfdsDataSource",
    "Vocabulary",
    "add_global_cache_dirs",
    "evaluation",
    "experimental",
    "get_dataset",
    "get_global_cache_dirs",
    "get_mixture_or_task",
    "get_subtasks",
    "loggers",
    "map_over_dataset",
    "maybe_get_mixture_or_task",
    "metrics",
    "mixing_rate_num_examples",
    "preprocessors",
    "set_global_cache_dirs",
    "set_tfds_data_dir_override",
    "utils",
    "vocabularies",
]


def __getattr__(name: str):
    """TfdsDataSource, TFExampleDataSource and FileDataSource: t5forge's TensorFlow-free
    readers, imported when a task module first names them."""
    if name in ("TfdsDataSource", "TFExampleDataSource", "FileDataSource"):
        return reader_class(name)
    raise AttributeError(f"module 'seqio' (t5forge.seqio) has no attribute {name!r}")
