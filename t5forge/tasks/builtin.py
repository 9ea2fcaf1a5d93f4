"""Built-in tasks over the real datasets in $T5FORGE_DATA_DIR (default: the bundled slice).

Eight tasks cover the workflows t5forge promises: translation, classification,
summarization, and pretraining with span corruption or UL2. Each is made by a small recipe
below, so adding a dataset is one line. Their vocabulary is $T5FORGE_VOCAB (a SentencePiece
model, read when a task is first used) with 100 extra ids, unless a caller registers them
again with `register_builtin_tasks(vocabulary=..., data_dir=...)`.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

from t5forge import storage
from t5forge.data import metrics
from t5forge.data import preprocessors as pp
from t5forge.data.providers.mixture import TaskRegistry
from t5forge.data.providers.task import Feature, Task
from t5forge.data.sources.text_files import JsonLinesSource
from t5forge.data.vocabularies import EnvironmentSentencePieceVocabulary

EXTRA_IDS = 100
SPLITS = ("train", "validation", "test")
CORPUS_SPLITS = ("train", "validation")


BUNDLED_DATA_DIR = Path(__file__).resolve().parent / "data"


def default_data_dir() -> os.PathLike:
    """$T5FORGE_DATA_DIR, else the data shipped inside the package (the en-de slice only).

    The installed package never looks outside itself: the other datasets need
    T5FORGE_DATA_DIR, and a task whose files are missing says so naming the path.
    """
    configured = os.environ.get("T5FORGE_DATA_DIR")
    return storage.path(configured) if configured else BUNDLED_DATA_DIR


def jsonl_splits(data_dir: str | os.PathLike, folder: str, splits=SPLITS) -> JsonLinesSource:
    """`<data_dir>/<folder>/<split>.jsonl.gz`, the layout of every shared dataset."""
    return JsonLinesSource(
        {s: str(storage.path(data_dir) / folder / f"{s}.jsonl.gz") for s in splits}
    )


def _features(vocabulary) -> dict[str, Feature]:
    return {"inputs": Feature(vocabulary), "targets": Feature(vocabulary)}


def _supervised_task(name, source, vocabulary, to_text, metric_fns, extra_steps=()):
    """to_text -> tokenize -> [cache] -> extra steps -> trim with EOS."""
    steps = [
        to_text,
        pp.tokenize,
        pp.CacheDatasetPlaceholder(),
        *extra_steps,
        pp.append_eos_after_trim,
    ]
    return Task(name, source, steps, _features(vocabulary), metric_fns=metric_fns)


def translation_task(name, data_dir, folder, source_language, target_language, vocabulary):
    """'translate English to German: <en>' -> '<de>', scored with BLEU."""
    to_text = pp.translate.bind(source_language=source_language, target_language=target_language)
    return _supervised_task(
        name, jsonl_splits(data_dir, folder), vocabulary, to_text, [metrics.bleu]
    )


def classification_task(name, data_dir, folder, text_key, label_key, prefix, vocabulary):
    """'<prefix>: <text>' -> '<label>'; long texts keep their first and last tokens."""
    to_text = pp.classify.bind(text_key=text_key, label_key=label_key, prefix=prefix)
    return _supervised_task(
        name,
        jsonl_splits(data_dir, folder),
        vocabulary,
        to_text,
        [metrics.accuracy, functools.partial(metrics.f1, average="macro")],
        extra_steps=[pp.truncate_head_and_tail],
    )


def summarization_task(name, data_dir, folder, article_key, summary_key, vocabulary):
    """'summarize: <article>' -> '<summary>', scored with ROUGE-1/2/Lsum x100 as T5 computes
    them, averaged over examples (`rouge_mean`) so one eval gives one number every time."""
    to_text = pp.summarize.bind(article_key=article_key, summary_key=summary_key)
    return _supervised_task(
        name, jsonl_splits(data_dir, folder), vocabulary, to_text, [metrics.rouge_mean]
    )


def _pretraining_task(name, data_dir, folder, vocabulary, objective, text_key):
    """Documents -> tokens -> [cache] -> the objective -> trim with EOS."""
    steps = [
        pp.rekey.bind(key_map={"inputs": None, "targets": text_key}),
        pp.tokenize,
        pp.CacheDatasetPlaceholder(),
        objective,
        pp.append_eos_after_trim,
    ]
    return Task(name, jsonl_splits(data_dir, folder, CORPUS_SPLITS), steps, _features(vocabulary))


def span_corruption_task(name, data_dir, folder, vocabulary, text_key="text"):
    """T5 pretraining: documents -> span-corrupted (inputs, targets) at the sequence length."""
    return _pretraining_task(name, data_dir, folder, vocabulary, pp.span_corruption, text_key)


def ul2_task(name, data_dir, folder, vocabulary, text_key="text"):
    """UL2 pretraining: the paper's seven denoisers, mode tokens [NLU] / [NLG] / [S2S]."""
    objective = pp.ul2_objective.bind(**pp.UL2_DENOISERS)
    return _pretraining_task(name, data_dir, folder, vocabulary, objective, text_key)


def builtin_tasks(vocabulary=None, data_dir=None) -> list[Task]:
    """The built-in tasks (not registered)."""
    vocab = vocabulary or EnvironmentSentencePieceVocabulary(extra_ids=EXTRA_IDS)
    root = storage.path(data_dir) if data_dir else default_data_dir()
    return [
        translation_task("en_de_lohelp_translate", root, "en_de_lohelp", "en", "de", vocab),
        translation_task("en_ro_messages_translate", root, "en_ro_messages", "en", "ro", vocab),
        classification_task(
            "rotten_tomatoes_sentiment",
            root,
            "rotten_tomatoes",
            "text",
            "label",
            "sentiment",
            vocab,
        ),
        summarization_task(
            "debian_summarize", root, "debian_descriptions", "description", "summary", vocab
        ),
        classification_task(
            "debian_section_classify",
            root,
            "debian_descriptions",
            "description",
            "section",
            "section",
            vocab,
        ),
        span_corruption_task("english_span_corruption", root, "english_corpus", vocab),
        span_corruption_task("romanian_span_corruption", root, "romanian_corpus", vocab),
        ul2_task("english_ul2", root, "english_corpus", vocab),
    ]


def register_builtin_tasks(vocabulary=None, data_dir=None) -> list[Task]:
    """(Re-)registers the built-in tasks, replacing earlier registrations of the same names."""
    tasks = builtin_tasks(vocabulary, data_dir)
    for task in tasks:
        TaskRegistry.remove(task.name)
        TaskRegistry.add(task)
    return tasks
