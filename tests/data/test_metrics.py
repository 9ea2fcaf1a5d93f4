"""Metrics on hand-checked values."""

import functools

import pytest

from t5forge.data import metrics
from t5forge.errors import DataError


def test_bleu_of_identical_strings_is_100_and_of_disjoint_is_0():
    sentences = ["the quick brown fox jumps over the lazy dog", "a b c d e f"]
    assert metrics.bleu(sentences, sentences)["bleu"] == pytest.approx(100.0)
    assert metrics.bleu(sentences, ["x y z w v u", "q r s t u v"])["bleu"] == pytest.approx(0.0)


def test_bleu_accepts_several_references_per_example():
    targets = [["the cat is here", "a cat is here now"], ["hello world again today"]]
    predictions = ["a cat is here now", "hello world again today"]
    assert metrics.bleu(targets, predictions)["bleu"] == pytest.approx(100.0)


def test_rouge_hand_checked():
    # unigrams: 5 of 6 shared -> F 5/6; bigrams: 3 of 5 shared -> F 3/5; LCS 5 of 6.
    scores = metrics.rouge(["the cat sat on the mat"], ["the cat lay on the mat"])
    assert scores == pytest.approx({"rouge1": 500 / 6, "rouge2": 60.0, "rougeLsum": 500 / 6})


def test_accuracy_sequence_accuracy_and_exact_match():
    assert metrics.accuracy([1, 0, 1, 1], [1, 1, 1, 0]) == {"accuracy": 50.0}
    assert metrics.sequence_accuracy(["ab", "c"], ["ab", "c "]) == {"sequence_accuracy": 50.0}
    # exact match normalizes case, punctuation and articles, and takes any reference.
    scores = metrics.exact_match(
        [["The Eiffel Tower", "Eiffel"], "Paris"], ["eiffel tower!", "Rome"]
    )
    assert scores == {"exact_match": 50.0}


def test_f1_macro_and_binary():
    targets = [1, 1, 0, 0]
    predictions = [1, 0, 0, 0]
    # class 1: tp 1, predicted 1, actual 2 -> 2/3; class 0: tp 2, predicted 3, actual 2 -> 4/5
    assert metrics.f1(targets, predictions)["f1"] == pytest.approx(100 * (2 / 3 + 4 / 5) / 2)
    binary = functools.partial(metrics.f1, average="binary", positive_label=1)
    assert binary(targets, predictions)["f1"] == pytest.approx(100 * 2 / 3)
    # a label nobody asked for counts against every class it is not.
    assert metrics.f1(["a", "b"], ["a", "garbage"])["f1"] == pytest.approx(100 * (1 + 0 + 0) / 3)


def test_rank_classification_picks_the_best_scoring_choice_per_example():
    targets = [(0, False), (0, True), (0, False), (1, True), (1, False), (2, False), (2, True)]
    scores = [-3.0, -1.0, -2.0, -5.0, -0.5, -0.1, -0.2]
    # example 0 right (choice 1), example 1 wrong, example 2 wrong.
    assert metrics.rank_classification(targets, scores) == {"accuracy": pytest.approx(100 / 3)}
    as_dicts = [{"idx": [i, 0], "is_correct": c} for i, c in targets]
    assert metrics.rank_classification(as_dicts, scores) == {"accuracy": pytest.approx(100 / 3)}


def test_mean_group_metric_averages_per_group():
    grouped_accuracy = metrics.mean_group_metric(metrics.accuracy)
    targets = [
        {"group": "q1", "value": 1},
        {"group": "q1", "value": 0},
        {"group": "q2", "value": 1},
    ]
    predictions = [
        {"group": "q1", "value": 1},
        {"group": "q1", "value": 1},
        {"group": "q2", "value": 1},
    ]
    # q1: 50, q2: 100 -> 75 (a plain mean over the three pairs would be 66.7)
    assert grouped_accuracy(targets, predictions) == {"accuracy": 75.0}


def test_mismatched_lengths_are_a_user_error():
    with pytest.raises(DataError, match="2 targets but 1 predictions"):
        metrics.accuracy([1, 2], [1])
