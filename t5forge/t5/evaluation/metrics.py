"""`t5.evaluation.metrics`: T5's metric functions, computed as T5 computes them.

BLEU is sacrebleu's corpus BLEU with T5's settings (targets: one reference stream, or a list
of streams); SQuAD and TriviaQA normalize as the official scripts; the scikit-learn scores T5
uses (accuracy, binary and macro F1, Matthews correlation) are computed with scikit-learn's
formulas, Pearson and Spearman by scipy. `rouge`, `rouge_mean`, `accuracy`,
`sequence_accuracy` and `mean_group_metric` are t5forge.data.metrics' own functions, which
give T5's numbers under T5's names and signatures: each metric has one implementation.
"""

from __future__ import annotations

import collections
import re
import string
from collections.abc import Callable

import numpy as np
import scipy.stats

from t5forge.data.metrics import (
    accuracy,
    corpus_bleu,
    mean_group_metric,
    per_class_f1,
    rouge,
    rouge_mean,
    sequence_accuracy,
)
from t5forge.errors import ConfigError

__all__ = [
    "accuracy",
    "all_match",
    "bleu",
    "deduplicate_metric",
    "f1_score_with_invalid",
    "mean_group_metric",
    "mean_multiclass_f1",
    "multirc_f1_over_all_answers",
    "pearson_corrcoef",
    "rouge",
    "rouge_mean",
    "sequence_accuracy",
    "sklearn_metrics_wrapper",
    "span_squad",
    "spearman_corrcoef",
    "squad",
    "trivia_qa",
]


def bleu(targets, predictions, tokenizer: str = "intl") -> dict[str, float]:
    """Corpus BLEU: targets are one reference per prediction, or a list of reference streams
    (T5's convention: each inner list holds one reference for every prediction)."""
    streams = [list(t) for t in targets] if isinstance(targets[0], list) else [list(targets)]
    return {"bleu": corpus_bleu(predictions, streams, tokenizer)}


def _normalize_answer(value: str, punctuation: str, replacement: str) -> str:
    value = value.lower()
    value = "".join(replacement if ch in set(punctuation) else ch for ch in value)
    value = re.sub(r"\b(a|an|the)\b", " ", value)
    return " ".join(value.split())


def normalize_squad(answer: str) -> str:
    """The official SQuAD v1.1 script's normalization."""
    return _normalize_answer(answer, string.punctuation, "")


def normalize_trivia_qa(answer: str) -> str:
    """The official TriviaQA script's normalization."""
    return _normalize_answer(answer, string.punctuation + "‘’´`_", " ").strip()


def _token_f1(target: str, prediction: str) -> float:
    predicted, expected = prediction.split(), target.split()
    same = sum((collections.Counter(predicted) & collections.Counter(expected)).values())
    if same == 0:
        return 0
    precision, recall = same / len(predicted), same / len(expected)
    return 2 * precision * recall / (precision + recall)


def qa_metrics(targets, predictions) -> dict[str, float]:
    """Exact match and token F1 x100, each the best over an example's references."""
    if len(targets) != len(predictions):
        raise ValueError("Number of targets and predictions must match.")
    em = np.mean([max(t == p for t in refs) for p, refs in zip(predictions, targets)])
    f1 = np.mean([max(_token_f1(t, p) for t in refs) for p, refs in zip(predictions, targets)])
    return {"em": em * 100, "f1": f1 * 100}


def squad(targets, predictions) -> dict[str, float]:
    """SQuAD EM and F1: targets are lists of reference answers."""
    targets = [[normalize_squad(t) for t in refs] for refs in targets]
    return qa_metrics(targets, [normalize_squad(p) for p in predictions])


def trivia_qa(targets, predictions) -> dict[str, float]:
    """TriviaQA EM and F1: targets are lists of reference answers."""
    targets = [[normalize_trivia_qa(t) for t in refs] for refs in targets]
    return qa_metrics(targets, [normalize_trivia_qa(p) for p in predictions])


def span_squad(targets, predictions) -> dict[str, float]:
    """SQuAD scores of 'start: i end: j' predictions over space-tokenized contexts."""

    def tokens(s):
        return re.sub(r"\W", " ", s).split()

    def answer(context, predicted):
        if len(predicted) < 4:
            return ""
        try:
            start, end = int(predicted[1]), int(predicted[3])
        except ValueError:
            return ""
        return " ".join(context[start : end + 1])

    answers = [
        answer(tokens(t["context"]), tokens(p)) for t, p in zip(targets, predictions, strict=True)
    ]
    return squad([t["answers"] for t in targets], answers)


def pearson_corrcoef(targets, predictions) -> dict[str, float]:
    return {"pearson_corrcoef": 100 * scipy.stats.pearsonr(targets, predictions)[0]}


def spearman_corrcoef(targets, predictions) -> dict[str, float]:
    return {"spearman_corrcoef": 100 * scipy.stats.spearmanr(targets, predictions)[0]}


def all_match(targets, predictions) -> dict[str, float]:
    return {"exact_match": 100 * float(np.array_equal(targets, predictions))}


# ---------------------------------------------------------------- scikit-learn's scores


def _matthews_corrcoef(targets, predictions) -> float:
    labels = sorted(set(np.asarray(targets).tolist()) | set(np.asarray(predictions).tolist()))
    index = {label: i for i, label in enumerate(labels)}
    confusion = np.zeros((len(labels), len(labels)))
    for t, p in zip(np.asarray(targets).tolist(), np.asarray(predictions).tolist(), strict=True):
        confusion[index[t], index[p]] += 1
    true_sum, predicted_sum = confusion.sum(axis=1), confusion.sum(axis=0)
    samples, correct = predicted_sum.sum(), np.trace(confusion)
    cov_true_pred = correct * samples - np.dot(true_sum, predicted_sum)
    cov_pred = samples**2 - np.dot(predicted_sum, predicted_sum)
    cov_true = samples**2 - np.dot(true_sum, true_sum)
    if cov_pred * cov_true == 0:
        return 0.0
    return float(cov_true_pred / np.sqrt(cov_true * cov_pred))


def _accuracy_score(targets, predictions) -> float:
    """scikit-learn's accuracy_score: a fraction, where T5's `accuracy` reports percent."""
    return accuracy(targets, predictions)["accuracy"] / 100


def _fbeta_score(targets, predictions, beta=1, labels=None, average="macro", **unused):
    if beta != 1 or average != "macro" or labels is None:
        raise ConfigError("fbeta_score: t5forge computes beta=1, average='macro' over labels")
    return float(np.mean(per_class_f1(targets, predictions, list(labels))))


def _f1_score(targets, predictions, pos_label=1, **unused):
    return float(per_class_f1(targets, predictions, [pos_label])[0])


_SKLEARN = {
    "accuracy_score": lambda t, p, **kw: _accuracy_score(t, p),
    "f1_score": _f1_score,
    "fbeta_score": _fbeta_score,
    "matthews_corrcoef": lambda t, p, **kw: _matthews_corrcoef(t, p),
}


def sklearn_metrics_wrapper(
    metric_str: str,
    metric_dict_str: str | None = None,
    metric_post_process_fn: Callable | None = None,
    **metric_fn_kwargs,
) -> Callable:
    """T5's wrapper of a sklearn.metrics function, for the ones T5's tasks use."""
    if metric_str not in _SKLEARN:
        raise ConfigError(
            f"sklearn_metrics_wrapper({metric_str!r}): t5forge computes "
            f"{', '.join(sorted(_SKLEARN))}; write other metrics as fn(targets, predictions)"
        )

    def fn(targets, predictions):
        value = _SKLEARN[metric_str](targets, predictions, **metric_fn_kwargs)
        if metric_post_process_fn is not None:
            value = metric_post_process_fn(value)
        return {metric_dict_str or metric_str: value}

    return fn


def _times_100(value: float) -> float:
    return 100 * value


def mean_multiclass_f1(num_classes: int, **metric_fn_kwargs) -> Callable:
    """The unweighted mean of the per-class F1 over classes 0..num_classes-1, x100."""
    return sklearn_metrics_wrapper(
        "fbeta_score",
        metric_dict_str=f"mean_{num_classes}class_f1",
        metric_post_process_fn=_times_100,
        beta=1,
        labels=range(num_classes),
        average="macro",
        **metric_fn_kwargs,
    )


def matthews_corrcoef_x100() -> Callable:
    """GLUE CoLA's metric as T5 names it: 'matthews_corrcoef', x100."""
    return sklearn_metrics_wrapper("matthews_corrcoef", metric_post_process_fn=_times_100)


def f1_score_with_invalid(targets, predictions) -> dict[str, float]:
    """Binary F1 x100 where any prediction other than 0 or 1 counts as wrong."""
    targets, predictions = np.asarray(targets), np.array(predictions)
    invalid = (predictions != 0) & (predictions != 1)
    predictions[invalid] = 1 - targets[invalid]
    return {"f1": 100 * _f1_score(targets, predictions)}


def multirc_f1_over_all_answers(targets, predictions) -> dict[str, float]:
    return f1_score_with_invalid([t["value"] for t in targets], [p["value"] for p in predictions])


def deduplicate_metric(metric_fn: Callable, group_key="group", value_key="value") -> Callable:
    """`metric_fn` over the first example of each group (ReCoRD repeats an example per
    answer)."""

    def deduplicated(targets, predictions):
        seen, kept_targets, kept_predictions = set(), [], []
        for target, prediction in zip(targets, predictions):
            if target[group_key] in seen:
                continue
            seen.add(target[group_key])
            kept_targets.append(target[value_key])
            kept_predictions.append(prediction[value_key])
        return metric_fn(kept_targets, kept_predictions)

    return deduplicated
