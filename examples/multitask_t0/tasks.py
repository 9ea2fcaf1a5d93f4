"""T0-style multitask: five prompted tasks over the shared data, one training mixture.

Every example is rendered with one of a few prompt templates per task, chosen by a hash of
the example (so every run, cache and worker agrees). `t0_train` mixes translation en->de and
en->ro, summarization and topic classification of Debian package descriptions, and review
sentiment, by example count (capped). `t0_eval` scores the generative tasks with BLEU/ROUGE on
decoded predictions and the classification tasks by rank classification: the model scores
every answer choice and the best-scoring one is its answer.

Import with `--module_import=examples.multitask_t0.tasks`. The vocabulary is $T5FORGE_VOCAB,
the data $T5FORGE_DATA_DIR, task caches are looked up in $T5FORGE_CACHE_DIR, and the eval
tasks read the first $T0_EVAL_EXAMPLES (default 200) validation rows of each dataset.
"""

import functools
import gzip
import json
import operator
import os
import zlib

from t5forge.data import (
    EnvironmentSentencePieceVocabulary,
    Feature,
    FunctionSource,
    MixtureRegistry,
    Task,
    TaskRegistry,
    metrics,
    mixing_rate_num_examples,
)
from t5forge.data import preprocessors as pp
from t5forge.seqio import add_global_cache_dirs
from t5forge.tasks.builtin import default_data_dir

MAX_EXAMPLES_PER_TASK = 20000  # T0's cap on a task's mixing rate
EVAL_EXAMPLES = int(os.environ.get("T0_EVAL_EXAMPLES", "200"))
SENTIMENTS = ("fresh", "rotten")
# The eight largest Debian sections (74% of packages); topic classification chooses among them.
SECTIONS = ("libs", "libdevel", "python", "doc", "perl", "utils", "haskell", "devel")

TEMPLATES = {
    "translate_en_de": [
        "translate English to German: {en}",
        "How would a German help page say this? {en}",
    ],
    "translate_en_ro": ["translate English to Romanian: {en}", "Say this in Romanian: {en}"],
    "summarize": [
        "summarize: {description}",
        "Write the one-line summary of this Debian package: {description}",
    ],
    "sentiment": [
        "Review: {text} Is this review fresh or rotten?",
        'A critic wrote: "{text}" Was the verdict fresh or rotten?',
    ],
    "section": [
        "{description} Which Debian section is this package in?",
        "Package description: {description} Section:",
    ],
}


def read_rows(data_dir, folder, split, limit=None, sections=None):
    """The rows of `<folder>/<split>.jsonl.gz`, optionally only the given sections, first `limit`."""
    with gzip.open(
        os.path.join(data_dir, folder, f"{split}.jsonl.gz"), "rt", encoding="utf-8"
    ) as lines:
        rows = [json.loads(line) for line in lines]
    if sections is not None:
        rows = [row for row in rows if row["section"] in sections]
    return rows[:limit]


def _source(folder, splits=("train", "validation"), sections=None, eval_only=False):
    data_dir = str(default_data_dir())
    if eval_only:
        return FunctionSource(
            functools.partial(read_rows, data_dir, folder, limit=EVAL_EXAMPLES, sections=sections),
            ["validation"],
        )
    return FunctionSource(
        functools.partial(read_rows, data_dir, folder, sections=sections), list(splits)
    )


@pp.example_preprocessor
def prompt(example, templates, target):
    """inputs: one of `templates` filled from the example (picked by a hash of its fields);
    targets: the `target` field."""
    key = zlib.crc32(json.dumps(example, sort_keys=True).encode("utf-8"))
    return {
        "inputs": templates[key % len(templates)].format(**example),
        "targets": str(example[target]),
    }


def answer_choices(choices, example):
    return list(choices)


def is_answer(choices, example):
    return [choice == example["targets"] for choice in choices]


def rank_target(text, example=None, is_target=False):
    """What the rank_classification metric compares: the pair's example index and correctness."""
    if not is_target:
        return text
    return {"idx": example["idx"], "is_correct": bool(example["is_correct"])}


def _features(vocabulary):
    return {"inputs": Feature(vocabulary), "targets": Feature(vocabulary)}


def generative_task(name, source, template_key, target, vocabulary, metric_fns=()):
    """Prompted text -> target text; evaluated on decoded predictions by `metric_fns`."""
    steps = [
        prompt.bind(templates=TEMPLATES[template_key], target=target),
        pp.tokenize,
        pp.CacheDatasetPlaceholder(),
        pp.append_eos_after_trim,
    ]
    return Task(name, source, steps, _features(vocabulary), metric_fns=metric_fns)


def rank_classification_task(name, source, template_key, target, choices, vocabulary):
    """Each prompted example becomes one (inputs, choice) pair per answer choice; the
    example counts as right when the correct choice gets the highest log-likelihood."""
    steps = [
        prompt.bind(templates=TEMPLATES[template_key], target=target),
        pp.rank_classification.bind(
            inputs_fn=operator.itemgetter("inputs"),
            targets_fn=functools.partial(answer_choices, choices),
            is_correct_fn=functools.partial(is_answer, choices),
        ),
        pp.tokenize,
        pp.CacheDatasetPlaceholder(),
        pp.append_eos_after_trim,
    ]
    return Task(
        name,
        source,
        steps,
        _features(vocabulary),
        postprocess_fn=rank_target,
        score_metric_fns=[metrics.rank_classification],
    )


def t0_tasks(vocabulary=None) -> tuple[list[Task], list[Task]]:
    """(training tasks, eval tasks)."""
    vocab = vocabulary or EnvironmentSentencePieceVocabulary()
    # the plain mean over examples: the same numbers each eval (T5's bootstrap resamples).
    rouge = functools.partial(metrics.rouge_mean, score_keys=("rouge1", "rouge2", "rougeL"))
    train = [
        generative_task(
            "t0_translate_en_de", _source("en_de_lohelp"), "translate_en_de", "de", vocab
        ),
        generative_task(
            "t0_translate_en_ro", _source("en_ro_messages"), "translate_en_ro", "ro", vocab
        ),
        generative_task(
            "t0_summarize_debian", _source("debian_descriptions"), "summarize", "summary", vocab
        ),
        generative_task("t0_sentiment", _source("rotten_tomatoes"), "sentiment", "label", vocab),
        generative_task(
            "t0_debian_section",
            _source("debian_descriptions", sections=SECTIONS),
            "section",
            "section",
            vocab,
        ),
    ]
    evaluation = [
        generative_task(
            "t0_translate_en_de_eval",
            _source("en_de_lohelp", eval_only=True),
            "translate_en_de",
            "de",
            vocab,
            [metrics.bleu],
        ),
        generative_task(
            "t0_translate_en_ro_eval",
            _source("en_ro_messages", eval_only=True),
            "translate_en_ro",
            "ro",
            vocab,
            [metrics.bleu],
        ),
        generative_task(
            "t0_summarize_debian_eval",
            _source("debian_descriptions", eval_only=True),
            "summarize",
            "summary",
            vocab,
            [rouge],
        ),
        rank_classification_task(
            "t0_sentiment_rank_eval",
            _source("rotten_tomatoes", eval_only=True),
            "sentiment",
            "label",
            SENTIMENTS,
            vocab,
        ),
        rank_classification_task(
            "t0_debian_section_rank_eval",
            _source("debian_descriptions", sections=SECTIONS, eval_only=True),
            "section",
            "section",
            SECTIONS,
            vocab,
        ),
    ]
    return train, evaluation


def register() -> None:
    """(Re-)registers the tasks and the mixtures `t0_train` and `t0_eval`."""
    train, evaluation = t0_tasks()
    for name in ("t0_train", "t0_eval"):
        MixtureRegistry.remove(name)
    for task in train + evaluation:
        TaskRegistry.remove(task.name)
        TaskRegistry.add(task)
    rate = functools.partial(mixing_rate_num_examples, maximum=MAX_EXAMPLES_PER_TASK)
    MixtureRegistry.add("t0_train", train, default_rate=rate)
    MixtureRegistry.add("t0_eval", evaluation, default_rate=1.0)
    if os.environ.get("T5FORGE_CACHE_DIR"):
        add_global_cache_dirs(os.environ["T5FORGE_CACHE_DIR"])


register()
