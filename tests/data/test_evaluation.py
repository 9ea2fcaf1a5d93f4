"""Evaluator: original order, padded batches, decoding + postprocessing, metrics, JSONL files."""

import gzip
import json

import numpy as np
import pytest

from t5forge.data import (
    ByteVocabulary,
    EncDecFeatureConverter,
    Evaluator,
    Feature,
    FunctionSource,
    Mixture,
    Task,
    metrics,
)
from t5forge.data import preprocessors as pp
from t5forge.data.cache import search_dirs as cache_dirs
from t5forge.data.cache.store import write_task_cache
from t5forge.errors import ConfigError
from t5forge.tasks.builtin import translation_task


@pytest.fixture(scope="module")
def vocabulary():
    """Bytes: lossless, so a perfect prediction decodes to exactly the target text."""
    return ByteVocabulary()


@pytest.fixture(scope="module")
def sentiment(make_sentiment_task, vocabulary):
    return make_sentiment_task("eval_sentiment", vocabulary)


def echo_targets(batch):
    """A perfect model: predicts exactly the target tokens."""
    return batch["decoder_target_tokens"]


def read_jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_perfect_predictions_score_100_and_are_logged_in_original_order(
    sentiment, shared_data, tmp_path
):
    shapes = set()

    def predict(batch):
        shapes.add(batch["encoder_input_tokens"].shape)
        return echo_targets(batch)

    evaluator = Evaluator(sentiment, {"inputs": 256, "targets": 16}, 64, tmp_path)
    assert evaluator.evaluate(predict, step=10) == {
        "eval_sentiment": {"accuracy": 100.0, "f1": 100.0}
    }
    assert shapes == {(64, 256)}  # 16 calls, the last one padded: one compiled shape

    with gzip.open(shared_data / "rotten_tomatoes" / "validation.jsonl.gz", "rt") as f:
        raw = [json.loads(line) for line in f]
    records = read_jsonl(tmp_path / "eval_sentiment-predictions.jsonl")
    assert len(records) == 1000
    assert records[0] == {
        "inputs": f"sentiment: {raw[0]['text']}",
        "targets": raw[0]["label"],
        "prediction": raw[0]["label"],
    }
    assert [r["targets"] for r in records] == [row["label"] for row in raw]

    evaluator.evaluate(lambda batch: np.zeros_like(batch["decoder_target_tokens"]), step=20)
    logged = read_jsonl(tmp_path / "eval_sentiment-metrics.jsonl")
    assert [line["step"] for line in logged] == [10, 20]
    assert logged[1]["metrics"]["accuracy"] == 0.0


def test_evaluating_from_the_task_cache_gives_the_same_metrics(sentiment, tmp_path):
    write_task_cache(sentiment, "validation", tmp_path / "cache", progress=False)
    previous = cache_dirs.get_global_cache_dirs()
    cache_dirs.set_global_cache_dirs([str(tmp_path / "cache")])
    try:
        evaluator = Evaluator(
            sentiment, {"inputs": 256, "targets": 16}, 250, tmp_path, use_cached=True
        )
        results = evaluator.evaluate(echo_targets)
    finally:
        cache_dirs.set_global_cache_dirs(previous)
    assert results == {"eval_sentiment": {"accuracy": 100.0, "f1": 100.0}}


def test_mixture_evaluates_each_task_with_its_own_metrics(
    sentiment, shared_data, vocabulary, tmp_path
):
    translation = translation_task(
        "eval_en_de", shared_data, "en_de_lohelp", "en", "de", vocabulary
    )
    mixture = Mixture("eval_mixture", [(sentiment, 1.0), (translation, 1.0)])
    # No feature lengths: each task uses its longest example, so nothing is trimmed.
    results = Evaluator(mixture, None, 128, tmp_path).evaluate(echo_targets, step=0)
    assert results["eval_sentiment"]["accuracy"] == 100.0
    assert results["eval_en_de"]["bleu"] == pytest.approx(100.0)


QUESTIONS = [
    {"question": "2 + 2", "choices": ["four", "twenty-two"], "answer": 0},
    {"question": "capital of France", "choices": ["Lyon", "Paris"], "answer": 1},
    {"question": "opposite of up", "choices": ["sideways", "down"], "answer": 1},
]


def questions(split):
    return QUESTIONS


def question_text(example):
    return f"question: {example['question']}"


def choices(example):
    return example["choices"]


def correct_flags(example):
    return [i == example["answer"] for i in range(len(example["choices"]))]


def choice_identity(text, example=None, is_target=False):
    """Targets of a rank-classification pair are (example index, is the choice correct)."""
    return {"idx": example["idx"], "is_correct": example["is_correct"]} if is_target else text


def test_rank_classification_scores_every_choice_and_picks_the_best(vocabulary, tmp_path):
    task = Task(
        "eval_choices",
        FunctionSource(questions, ["validation"]),
        [
            pp.rank_classification.bind(
                inputs_fn=question_text, targets_fn=choices, is_correct_fn=correct_flags
            ),
            pp.tokenize,
            pp.append_eos,
        ],
        {"inputs": Feature(vocabulary), "targets": Feature(vocabulary)},
        postprocess_fn=choice_identity,
        score_metric_fns=[metrics.rank_classification],
    )

    def prefer_short_answers(batch):
        return -batch["decoder_loss_weights"].sum(axis=1).astype(np.float32)

    results = Evaluator(task, {"inputs": 32, "targets": 16}, 4, tmp_path).evaluate(
        score_fn=prefer_short_answers
    )
    # 'four' and 'down' are right and shortest; 'Lyon' beats 'Paris' and is wrong.
    assert results == {"eval_choices": {"accuracy": pytest.approx(200 / 3)}}
    records = read_jsonl(tmp_path / "eval_choices-predictions.jsonl")
    assert [r["targets"] for r in records[:2]] == [
        {"idx": [0, 0], "is_correct": True},
        {"idx": [0, 1], "is_correct": False},
    ]
    assert records[0]["score"] == -5.0  # 'four' + EOS, one byte each


def test_misuse_is_a_config_error(sentiment, tmp_path):
    with pytest.raises(ConfigError, match="needs an unpacked converter"):
        Evaluator(sentiment, None, 8, tmp_path, converter=EncDecFeatureConverter(pack=True))
    evaluator = Evaluator(sentiment, {"inputs": 64, "targets": 8}, 500, tmp_path)
    with pytest.raises(ConfigError, match="needs a predict_fn, a score_fn, or both"):
        evaluator.evaluate()
    with pytest.raises(ConfigError, match="'eval_sentiment' has metrics that need a predict_fn"):
        evaluator.evaluate(score_fn=lambda batch: np.zeros(len(batch["encoder_input_tokens"])))
