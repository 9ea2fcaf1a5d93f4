"""One owner per metric: T5's names are t5forge.data.metrics' functions, and each gives the
numbers of the reference scorers (rouge-score, sacrebleu) on real text and T5's own values."""

import gzip
import json
import math
from pathlib import Path

import numpy as np
import pytest
import sacrebleu
from rouge_score import rouge_scorer, scoring

from t5forge.data import metrics
from t5forge.errors import DataError
from t5forge.t5.evaluation import metrics as t5_metrics

T5_REFERENCE = json.loads(
    (Path(__file__).parents[1] / "seqio_port" / "reference" / "t5_reference.json").read_text()
)["metrics"]
ROUGE_KEYS = ("rouge1", "rouge2", "rougeLsum")


def _rows(shared_data, folder, count):
    with gzip.open(shared_data / folder / "validation.jsonl.gz", "rt", encoding="utf-8") as f:
        return [json.loads(line) for line, _ in zip(f, range(count))]


@pytest.fixture(scope="module")
def summaries(shared_data):
    """Debian descriptions as tokenized summaries (' . ' between sentences, as T5's
    summarization data has them) and a model-like guess: the one-line summary, then the
    description's last sentence."""
    targets, predictions = [], []
    for row in _rows(shared_data, "debian_descriptions", 40):
        sentences = [s for s in row["description"].rstrip(".").split(". ") if s]
        targets.append(" . ".join(sentences) + " .")
        predictions.append(f"{row['summary']} . {sentences[-1]} .")
    assert sum(" . " in t for t in targets) > 20  # most have several sentences
    return targets, predictions


def _rouge_score_per_example(targets, predictions, **scorer_options):
    """rouge-score itself, with T5's newline after ' . ' so rougeLsum splits sentences."""
    scorer = rouge_scorer.RougeScorer(list(ROUGE_KEYS), **scorer_options)
    return [
        scorer.score(t.replace(" . ", " .\n"), p.replace(" . ", " .\n"))
        for t, p in zip(targets, predictions)
    ]


def test_each_t5_metric_name_is_the_one_owner():
    for name in ("rouge", "rouge_mean", "accuracy", "sequence_accuracy", "mean_group_metric"):
        assert getattr(t5_metrics, name) is getattr(metrics, name), name


def test_rouge_is_rouge_scores_bootstrap_mid_as_t5_aggregates(summaries):
    targets, predictions = summaries
    aggregator = scoring.BootstrapAggregator()
    for scores in _rouge_score_per_example(targets, predictions):
        aggregator.add_scores(scores)
    np.random.seed(0)
    expected = {key: 100 * value.mid.fmeasure for key, value in aggregator.aggregate().items()}
    np.random.seed(0)
    assert metrics.rouge(targets, predictions) == pytest.approx(expected, rel=1e-12)


def test_rouge_mean_and_stemming_are_options_of_the_same_rouge(summaries):
    targets, predictions = summaries
    for options in ({}, {"use_stemmer": True}):
        per_example = _rouge_score_per_example(targets, predictions, **options)
        expected = {
            key: 100 * float(np.mean([scores[key].fmeasure for scores in per_example]))
            for key in ROUGE_KEYS
        }
        assert metrics.rouge_mean(targets, predictions, **options) == pytest.approx(
            expected, rel=1e-12
        )
        assert metrics.rouge(targets, predictions, aggregate="mean", **options) == pytest.approx(
            expected, rel=1e-12
        )


def test_rougelsum_scores_sentence_by_sentence(summaries):
    """T5's newline after ' . ' is what makes rougeLsum differ from summary-level rougeL."""
    targets, predictions = summaries
    scores = metrics.rouge_mean(targets, predictions, score_keys=("rougeL", "rougeLsum"))
    unsplit = rouge_scorer.RougeScorer(["rougeLsum"])
    whole_text = np.mean([unsplit.score(t, p)["rougeLsum"].fmeasure for t, p in zip(*summaries)])
    assert scores["rougeLsum"] > scores["rougeL"]
    assert scores["rougeL"] == pytest.approx(100 * whole_text, rel=1e-12)


def test_bleu_is_sacrebleus_corpus_bleu_with_t5s_settings(shared_data):
    rows = _rows(shared_data, "en_de_lohelp", 200)
    targets = [row["de"] for row in rows]
    # a model-like guess: the reference with every fourth word left out
    predictions = [" ".join(w for i, w in enumerate(t.split()) if i % 4 != 3) for t in targets]
    expected = sacrebleu.metrics.BLEU(tokenize="intl").corpus_score(predictions, [targets]).score
    assert 20 < expected < 90
    assert metrics.bleu(targets, predictions)["bleu"] == pytest.approx(expected, rel=1e-12)
    assert t5_metrics.bleu(targets, predictions)["bleu"] == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("module", [metrics, t5_metrics], ids=["seqio_names", "t5_names"])
def test_owners_give_t5s_reference_values(module):
    """The values T5 0.9.4 computed (tests/seqio_port/reference), under both names."""
    cases = {
        "rouge_seed0": module.rouge,
        "accuracy": module.accuracy,
        "sequence_accuracy": module.sequence_accuracy,
        "multirc_exact_match": module.mean_group_metric(t5_metrics.all_match),
    }
    for case, fn in cases.items():
        reference = T5_REFERENCE[case]
        np.random.seed(0)  # T5's ROUGE takes the mid value of a bootstrap
        value = fn(reference["targets"], reference["predictions"])
        assert set(value) == set(reference["value"]), case
        for key, number in reference["value"].items():
            assert math.isclose(value[key], number, rel_tol=1e-9, abs_tol=1e-9), (case, key)


def test_accuracy_on_real_labels_and_t5s_fraction_scale(shared_data):
    labels = [row["label"] for row in _rows(shared_data, "rotten_tomatoes", 300)]
    guesses = ["fresh" if i % 3 else "rotten" for i in range(len(labels))]
    right = sum(label == guess for label, guess in zip(labels, guesses))
    assert metrics.accuracy(labels, guesses) == {"accuracy": pytest.approx(100 * right / 300)}
    fraction = t5_metrics.sklearn_metrics_wrapper("accuracy_score")(labels, guesses)
    assert fraction == {"accuracy_score": pytest.approx(right / 300)}


def test_mean_group_metric_reports_subgroup_scores_on_request():
    targets = [
        {"group": "q1", "value": 1},
        {"group": "q1", "value": 0},
        {"group": "q2", "value": 1},
    ]
    predictions = [{"value": 1}, {"value": 1}, {"value": 1}]
    grouped = metrics.mean_group_metric(metrics.accuracy, return_subgroup_scores=True)
    assert grouped(targets, predictions) == {
        "accuracy": 75.0,
        "q1-accuracy": 50.0,
        "q2-accuracy": 100.0,
    }


def test_an_unknown_rouge_aggregate_is_one_clear_error():
    with pytest.raises(DataError, match="aggregate must be 'bootstrap' or 'mean', got 'median'"):
        metrics.rouge(["a b"], ["a b"], aggregate="median")
