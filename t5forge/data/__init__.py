"""t5forge's data API: what a task module, a script or a notebook imports.

`from t5forge.data import Task, Feature, TaskRegistry, JsonLinesSource, SentencePieceVocabulary,
pp` names every piece of a task; the modules behind the names are the data wing's families
(sources/, tf_formats/, preprocessors/, grain_ops/, cache/, providers/) and may move. Each name
is imported on first use, so `import t5forge.data` stays as light as `import t5forge`.
"""

import importlib

# Exported name -> the module that defines it.
_EXPORTS = {
    # dataset providers and their registries
    "Feature": "t5forge.data.providers.task",
    "Task": "t5forge.data.providers.task",
    "DatasetProvider": "t5forge.data.providers.task",
    "Mixture": "t5forge.data.providers.mixture",
    "TaskRegistry": "t5forge.data.providers.mixture",
    "MixtureRegistry": "t5forge.data.providers.mixture",
    "get_mixture_or_task": "t5forge.data.providers.mixture",
    "mixing_rate_num_examples": "t5forge.data.providers.mixture",
    # sources
    "DataSource": "t5forge.data.sources",
    "JsonLinesSource": "t5forge.data.sources.text_files",
    "TextLineSource": "t5forge.data.sources.text_files",
    "TsvSource": "t5forge.data.sources.text_files",
    "HuggingFaceSource": "t5forge.data.sources.hugging_face",
    "FunctionSource": "t5forge.data.sources.function",
    "FileDataSource": "t5forge.data.sources.files",
    "TFExampleDataSource": "t5forge.data.sources.files",
    "TfdsDataSource": "t5forge.data.sources.tfds.source",
    # vocabularies
    "SentencePieceVocabulary": "t5forge.data.vocabularies",
    "EnvironmentSentencePieceVocabulary": "t5forge.data.vocabularies",
    "ByteVocabulary": "t5forge.data.vocabularies",
    # feature converters
    "FeatureConverter": "t5forge.data.feature_converters",
    "EncDecFeatureConverter": "t5forge.data.feature_converters",
    "DecoderFeatureConverter": "t5forge.data.feature_converters",
    "PrefixLMFeatureConverter": "t5forge.data.feature_converters",
    # batches and evaluation
    "BatchIterator": "t5forge.data.batch_iterator",
    "make_batch_iterator": "t5forge.data.batch_iterator",
    "Evaluator": "t5forge.data.evaluator",
}

# Exported name -> the module it is (`pp.tokenize`, `metrics.bleu`).
_MODULES = {
    "pp": "t5forge.data.preprocessors",
    "metrics": "t5forge.data.metrics",
}


def __getattr__(name):
    """Imports an exported name's module on first use."""
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
    elif name in _MODULES:
        value = importlib.import_module(_MODULES[name])
    else:
        raise AttributeError(f"module 't5forge.data' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__():
    return sorted([*globals(), *_EXPORTS, *_MODULES])


__all__ = sorted([*_EXPORTS, *_MODULES])
