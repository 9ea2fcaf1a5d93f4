"""Evaluation metrics with SeqIO's calling convention and the field's reference scorers.

Prediction metrics are `fn(targets, predictions) -> {name: float}`; score metrics are
`fn(targets, scores) -> {name: float}`. Both take whole lists after postprocessing, so a
task can name them in `metric_fns` / `score_metric_fns` and the Evaluator stays generic.
Percent-valued metrics (BLEU, ROUGE, accuracy, F1, exact match) are on a 0-100 scale, as
in T5 papers and SeqIO logs, so numbers compare directly with published ones.

The scorers are imported where they score: rouge-score pulls in nltk and scipy (about a
second), which every command naming a task would otherwise pay at start-up.
"""

from __future__ import annotations

import logging
import re
import string
from collections import defaultdict
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

import numpy as np

from t5forge.errors import DataError

logger = logging.getLogger(__name__)

MetricFn = Callable[[Sequence[Any], Sequence[Any]], dict[str, float]]


def _check_lengths(targets: Sequence, predictions: Sequence, metric: str) -> None:
    if len(targets) != len(predictions):
        raise DataError(
            f"metric {metric}: {len(targets)} targets but {len(predictions)} predictions; "
            "pass one prediction per target"
        )
    if not targets:
        raise DataError(f"metric {metric}: no examples to score; the eval split is empty")


def _reference_lists(targets: Sequence[str | Sequence[str]]) -> list[list[str]]:
    """One list of references per example (a plain string is one reference)."""
    return [[t] if isinstance(t, str) else list(t) for t in targets]


def bleu(targets: Sequence[str | Sequence[str]], predictions: Sequence[str]) -> dict[str, float]:
    """Corpus BLEU from sacrebleu with T5's settings (intl tokenizer, exp smoothing).

    Each target may be one string or a list of reference strings; examples may have
    different numbers of references.
    """
    _check_lengths(targets, predictions, "bleu")
    references = _reference_lists(targets)
    depth = max(len(refs) for refs in references)
    # sacrebleu wants one stream per reference position; None marks a missing reference.
    streams = [[refs[i] if i < len(refs) else None for refs in references] for i in range(depth)]
    return {"bleu": corpus_bleu(predictions, streams)}


def corpus_bleu(predictions: Sequence[str], streams, tokenize: str = "intl") -> float:
    """sacrebleu's corpus BLEU with T5's settings (exp smoothing, no lowercasing) over
    reference streams (one list per reference position, one reference per prediction)."""
    import sacrebleu

    score = sacrebleu.corpus_bleu(
        list(predictions),
        streams,
        smooth_method="exp",
        smooth_value=0.0,
        force=False,
        lowercase=False,
        tokenize=tokenize,
        use_effective_order=False,
    )
    return float(score.score)


def _newline_after_spaced_periods(text: str) -> str:
    """T5's sentence handling for rougeLsum: rouge-score splits summaries at newlines, and
    T5 puts one after each space-separated period (' . ', as tokenized summaries have)."""
    return text.replace(" . ", " .\n")


def rouge(
    targets: Sequence[str],
    predictions: Sequence[str],
    score_keys: Sequence[str] = ("rouge1", "rouge2", "rougeLsum"),
    aggregate: str = "bootstrap",
    verbose: bool = True,
    **scorer_options: Any,
) -> dict[str, float]:
    """ROUGE F-measure x100 per key, the numbers `t5.evaluation.metrics.rouge` reports.

    The one ROUGE in t5forge: rouge-score's RougeScorer over each (target, prediction)
    with T5's newline after ' . ' (rougeLsum scores sentence by sentence).
    `aggregate="bootstrap"` (T5's) takes the mid value of rouge-score's
    BootstrapAggregator, which resamples with numpy's global random state;
    `aggregate="mean"` takes the plain mean over examples (deterministic: `rouge_mean`).
    `scorer_options` go to RougeScorer (`use_stemmer`, `tokenizer`, `split_summaries`);
    T5 passes none. `verbose` logs the bootstrap's 95% interval, as T5 does.
    """
    from rouge_score import rouge_scorer, scoring

    _check_lengths(targets, predictions, "rouge")
    if aggregate not in ("bootstrap", "mean"):
        raise DataError(f"metric rouge: aggregate must be 'bootstrap' or 'mean', got {aggregate!r}")
    scorer = rouge_scorer.RougeScorer(list(score_keys), **scorer_options)
    per_example = [
        scorer.score(
            target=_newline_after_spaced_periods(target),
            prediction=_newline_after_spaced_periods(prediction),
        )
        for target, prediction in zip(targets, predictions)
    ]
    if aggregate == "mean":
        return {
            key: 100.0 * float(np.mean([scores[key].fmeasure for scores in per_example]))
            for key in score_keys
        }
    aggregator = scoring.BootstrapAggregator()
    for scores in per_example:
        aggregator.add_scores(scores)
    result = aggregator.aggregate()
    if verbose:
        for key in score_keys:
            logger.info(
                "%s = %.2f, 95%% confidence [%.2f, %.2f]",
                key,
                100 * result[key].mid.fmeasure,
                100 * result[key].low.fmeasure,
                100 * result[key].high.fmeasure,
            )
    return {key: 100.0 * float(result[key].mid.fmeasure) for key in score_keys}


def rouge_mean(
    targets: Sequence[str],
    predictions: Sequence[str],
    score_keys: Sequence[str] = ("rouge1", "rouge2", "rougeLsum"),
    **scorer_options: Any,
) -> dict[str, float]:
    """`rouge` with `aggregate="mean"`: the plain mean over examples, the same from run to
    run (the bootstrap's mid value moves with numpy's random state)."""
    return rouge(targets, predictions, score_keys, aggregate="mean", **scorer_options)


def _percent_equal(targets: Sequence, predictions: Sequence, metric: str) -> float:
    _check_lengths(targets, predictions, metric)
    return 100.0 * float(np.mean([t == p for t, p in zip(targets, predictions)]))


def accuracy(targets: Sequence[Hashable], predictions: Sequence[Hashable]) -> dict[str, float]:
    """Percentage of predictions equal to their label (classification tasks); T5's
    `accuracy` (scikit-learn's accuracy_score x100) gives the same number."""
    return {"accuracy": _percent_equal(targets, predictions, "accuracy")}


def sequence_accuracy(targets: Sequence[str], predictions: Sequence[str]) -> dict[str, float]:
    """Percentage of generated sequences identical to the target, character for character."""
    return {"sequence_accuracy": _percent_equal(targets, predictions, "sequence_accuracy")}


def per_class_f1(
    targets: Sequence[Hashable], predictions: Sequence[Hashable], labels: Sequence[Hashable]
) -> list[float]:
    """F1 of each label as scikit-learn computes it (0 where a label is neither predicted
    nor expected): the one per-class F1 behind `f1` and T5's scikit-learn scores."""
    targets, predictions = list(targets), list(predictions)
    scores = []
    for label in labels:
        true_pos = sum(t == label and p == label for t, p in zip(targets, predictions))
        denominator = sum(p == label for p in predictions) + sum(t == label for t in targets)
        scores.append(2.0 * true_pos / denominator if denominator else 0.0)
    return scores


def f1(
    targets: Sequence[Hashable],
    predictions: Sequence[Hashable],
    average: str = "macro",
    positive_label: Hashable = 1,
) -> dict[str, float]:
    """F1 x100: `macro` averages over every class seen in targets or predictions;
    `binary` scores `positive_label` only. Predictions outside the label set (a model
    generating garbage) count as wrong for every class. Bind options with functools.partial.
    """
    _check_lengths(targets, predictions, "f1")
    if average == "binary":
        classes = [positive_label]
    elif average == "macro":
        classes = sorted(set(targets) | set(predictions), key=repr)
    else:
        raise DataError(f"metric f1: average must be 'macro' or 'binary', got {average!r}")
    per_class = per_class_f1(targets, predictions, classes)
    return {"f1": 100.0 * float(np.mean(per_class))}


def _normalize_answer(text: str) -> str:
    """SQuAD-style normalization: lowercase, no punctuation, no articles, single spaces."""
    text = "".join(ch for ch in text.lower() if ch not in string.punctuation)
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def exact_match(
    targets: Sequence[str | Sequence[str]], predictions: Sequence[str]
) -> dict[str, float]:
    """Percentage of predictions matching any reference after SQuAD normalization."""
    _check_lengths(targets, predictions, "exact_match")
    hits = [
        any(_normalize_answer(prediction) == _normalize_answer(ref) for ref in refs)
        for refs, prediction in zip(_reference_lists(targets), predictions)
    ]
    return {"exact_match": 100.0 * float(np.mean(hits))}


def mean_group_metric(
    metric_fn: MetricFn,
    group_key: str = "group",
    value_key: str = "value",
    return_subgroup_scores: bool = False,
) -> MetricFn:
    """Turns `metric_fn` into one computed per group and averaged over groups (T5's and
    SeqIO's `mean_group_metric`).

    Targets and predictions are dicts holding the group id under `group_key` and the value
    to score under `value_key` (e.g. one group per question in MultiRC). Groups must be
    whole: a subsample that cuts a group scores it on part of its examples.
    `return_subgroup_scores` adds each group's own score as `<group>-<metric>`.
    """

    def grouped(targets: Sequence[Mapping], predictions: Sequence[Mapping]) -> dict[str, float]:
        _check_lengths(targets, predictions, "mean_group_metric")
        groups: dict[Hashable, tuple[list, list]] = defaultdict(lambda: ([], []))
        for target, prediction in zip(targets, predictions):
            group_targets, group_predictions = groups[target[group_key]]
            group_targets.append(target[value_key])
            group_predictions.append(prediction[value_key])
        scores: dict[str, list[float]] = defaultdict(list)
        for group, (group_targets, group_predictions) in groups.items():
            for name, score in metric_fn(group_targets, group_predictions).items():
                scores[name].append(score)
                if return_subgroup_scores:
                    scores[f"{group}-{name}"].append(score)
        return {name: float(np.mean(values)) for name, values in scores.items()}

    return grouped


def rank_classification(
    targets: Sequence[tuple[Hashable, bool] | Mapping[str, Any]], scores: Sequence[float]
) -> dict[str, float]:
    """Accuracy x100 of picking, per example, the answer choice the model scores highest.

    Each target describes one (input, choice) pair as `(example_idx, is_correct)` or a dict
    with `idx` (an example index or the preprocessor's `[example, choice]`) and `is_correct`;
    `scores` holds the model's log-likelihood of each pair.
    An example counts as right when its top-scoring choice is a correct one (ties go to
    the first choice, as argmax does).
    """
    _check_lengths(targets, scores, "rank_classification")
    choices: dict[Hashable, list[tuple[float, bool]]] = defaultdict(list)
    for target, score in zip(targets, scores):
        if isinstance(target, Mapping):
            example_idx, is_correct = target["idx"], target["is_correct"]
        else:
            example_idx, is_correct = target[0], target[1]
        if np.ndim(example_idx):  # rank_classification's idx is [example, choice]
            example_idx = int(np.asarray(example_idx).flat[0])
        choices[example_idx].append((float(score), bool(is_correct)))
    right = [pairs[int(np.argmax([score for score, _ in pairs]))][1] for pairs in choices.values()]
    return {"accuracy": 100.0 * float(np.mean(right))}
