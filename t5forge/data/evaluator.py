"""Evaluator: run a model over a task's eval split and compute the task's own metrics.

The eval split is read once, in its original order (no shuffle, one epoch, no packing),
converted and cut into fixed-shape batches whose last one is padded, so a jitted
predict/score function compiles once. Results are de-padded, decoded with the task's
target vocabulary and postprocessed exactly like the targets, then handed to the task's
metric functions. Every call leaves `<task>-predictions.jsonl` (what the model said, beside
its input and target) and appends a line to `<task>-metrics.jsonl`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from t5forge import storage
from t5forge.data.feature_converters import MODEL_DTYPE, EncDecFeatureConverter, FeatureConverter
from t5forge.data.providers.mixture import Mixture, get_mixture_or_task
from t5forge.data.providers.task import Task
from t5forge.errors import ConfigError, DataError, T5ForgeError
from t5forge.user_code import described, raised_in_user_code

Batch = dict[str, np.ndarray]
PredictFn = Callable[[Batch], Any]  # -> int tokens [batch, length]
ScoreFn = Callable[[Batch], Any]  # -> float scores [batch]


def _json_value(value: Any) -> Any:
    """Postprocessed values may be numpy scalars or arrays; JSON wants plain types."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (list, tuple)):
        return [_json_value(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _json_value(v) for k, v in value.items()}
    return value


def _batches(rows: list[Batch], padding_row: Batch, batch_size: int) -> list[Batch]:
    """Stacks rows into full batches; the last is filled with padding rows."""
    batches = []
    for start in range(0, len(rows), batch_size):
        chunk = rows[start : start + batch_size]
        chunk = chunk + [padding_row] * (batch_size - len(chunk))
        batches.append(
            {name: np.stack([row[name] for row in chunk]).astype(MODEL_DTYPE) for name in chunk[0]}
        )
    return batches


def _metric_values(task: Task, fn: Callable, targets: list, outputs: list) -> dict[str, float]:
    """`fn(targets, outputs)` as {name: float}; a metric that raises or returns anything else is
    one DataError naming the task and the metric, not a traceback from inside the evaluation."""
    name = getattr(fn, "__name__", type(fn).__name__)
    where = f"task {task.name!r}, metric {name}"
    try:
        values = fn(targets, outputs)
    except T5ForgeError as e:
        raise DataError(f"{where}: {e}") from None
    except Exception as e:
        at = raised_in_user_code(e)
        place = f" ({at})" if at else ""
        raise DataError(f"{where} raised {described(e)}{place}; fix the metric function") from None
    if not isinstance(values, Mapping):
        raise DataError(
            f"{where} returned {type(values).__name__} {values!r:.60}, not a dict; return "
            f"{{name: value}}, e.g. {{{name!r}: value}}"
        )
    numbers = {}
    for key, value in values.items():
        try:
            numbers[str(key)] = float(value)
        except (TypeError, ValueError):
            raise DataError(
                f"{where} returned {value!r:.60} for {key!r}, not a number; return {{name: number}}"
            ) from None
    return numbers


class _TaskEvalData:
    """One task's eval examples, model batches and postprocessed targets, built once."""

    def __init__(self, task: Task, split, feature_lengths, converter, batch_size, use_cached):
        self.task = task
        self.vocabulary = task.output_features["targets"].vocabulary  # decodes the predictions
        examples = list(
            task.get_dataset(
                split,
                sequence_length=feature_lengths,
                shuffle=False,
                num_epochs=1,
                use_cached=use_cached,
            )
        )
        if not examples:
            raise DataError(f"task {task.name!r} split {split!r} has no examples to evaluate")
        lengths = feature_lengths or {
            name: max(len(example[name]) for example in examples)
            for name in converter.task_features
        }
        rows = converter.convert(examples, lengths)
        self.examples = examples
        self.batches = _batches(rows, converter.padding_row(lengths), batch_size)
        self.targets = [
            task.postprocess(self.text(example, "targets"), example=example, is_target=True)
            for example in examples
        ]

    def text(self, example: Mapping[str, Any], feature: str) -> str:
        """The feature as text: its pretokenized copy if kept, else decoded tokens."""
        if f"{feature}_pretokenized" in example:
            return str(example[f"{feature}_pretokenized"])
        if feature not in example:
            return ""
        return self.task.output_features[feature].vocabulary.decode(
            np.asarray(example[feature]).tolist()
        )

    def run(self, fn: Callable[[Batch], Any]) -> list[np.ndarray]:
        """fn over every batch, de-padded to one result per example, in order."""
        results = [row for batch in self.batches for row in np.asarray(fn(batch))]
        return results[: len(self.examples)]


class Evaluator:
    """Evaluates predictions and/or scores of a model on the eval split of a task or mixture.

    feature_lengths: task feature lengths for the converter; None uses the longest example
    of each task. batch_size: rows per call of predict_fn / score_fn (the last batch is
    padded). output_dir: where the JSONL files go. A mixture evaluates each of its tasks
    that has metrics.
    """

    def __init__(
        self,
        mixture_or_task: str | Task | Mixture,
        feature_lengths: Mapping[str, int] | None,
        batch_size: int,
        output_dir: str | os.PathLike,
        *,
        split: str = "validation",
        converter: FeatureConverter | None = None,
        use_cached: bool = False,
    ):
        converter = converter or EncDecFeatureConverter(pack=False)
        if converter.pack:
            raise ConfigError(
                f"Evaluator needs an unpacked converter (one example per row), got {converter!r}"
            )
        if batch_size < 1:
            raise ConfigError(f"batch_size must be at least 1, got {batch_size}")
        source = get_mixture_or_task(mixture_or_task)
        tasks = [t for t in source.tasks if t.metric_fns or t.score_metric_fns]
        if not tasks:
            raise DataError(
                f"{source.name!r} has no task with metric_fns or score_metric_fns; "
                "nothing to evaluate (give the task metrics, e.g. metric_fns=[metrics.bleu])"
            )
        self.output_dir = storage.path(output_dir)
        self.split = split
        lengths = dict(feature_lengths) if feature_lengths else None
        self._data = [
            _TaskEvalData(task, split, lengths, converter, batch_size, use_cached) for task in tasks
        ]

    @property
    def tasks(self) -> list[Task]:
        return [data.task for data in self._data]

    def evaluate(
        self,
        predict_fn: PredictFn | None = None,
        score_fn: ScoreFn | None = None,
        step: int | None = None,
        *,
        task_predict_fns: Mapping[str, PredictFn] | None = None,
    ) -> dict[str, dict[str, float]]:
        """Runs the model functions, computes every task's metrics, writes the JSONL files.

        predict_fn(batch) -> target token ids [batch, length] feeds the tasks' metric_fns;
        score_fn(batch) -> log-likelihoods [batch] feeds their score_metric_fns.
        task_predict_fns {task name: predict_fn} replaces predict_fn for those tasks (e.g.
        label prediction for tasks with single_token_labels).
        Returns {task name: {metric name: value}}.
        """
        task_predict_fns = dict(task_predict_fns or {})
        if predict_fn is None and score_fn is None and not task_predict_fns:
            raise ConfigError("Evaluator.evaluate needs a predict_fn, a score_fn, or both")
        self.output_dir.mkdir(parents=True, exist_ok=True)
        return {
            data.task.name: self._evaluate_task(
                data, task_predict_fns.get(data.task.name, predict_fn), score_fn, step
            )
            for data in self._data
        }

    def _evaluate_task(self, data: _TaskEvalData, predict_fn, score_fn, step) -> dict:
        task = data.task
        needs = {
            "predict_fn": (task.metric_fns, predict_fn),
            "score_fn": (task.score_metric_fns, score_fn),
        }
        for name, (fns, given) in needs.items():
            if fns and given is None:
                raise ConfigError(
                    f"task {task.name!r} has metrics that need a {name}; pass {name}= to evaluate"
                )
        records = [
            {"inputs": data.text(example, "inputs"), "targets": _json_value(target)}
            for example, target in zip(data.examples, data.targets)
        ]
        outputs = {}  # what each kind of metric reads: predictions, scores
        if task.metric_fns:
            outputs["prediction"] = [
                task.postprocess(
                    data.vocabulary.decode(np.asarray(tokens).tolist()),
                    example=example,
                    is_target=False,
                )
                for tokens, example in zip(data.run(predict_fn), data.examples)
            ]
        if task.score_metric_fns:
            outputs["score"] = [float(score) for score in data.run(score_fn)]
        for field, values in outputs.items():
            for record, value in zip(records, values):
                record[field] = _json_value(value)
        # Written before the metrics run: a metric that fails leaves what the model said.
        storage.write_atomically(
            self.output_dir / f"{task.name}-predictions.jsonl",
            "".join(json.dumps(record, ensure_ascii=False) + "\n" for record in records),
        )
        metrics: dict[str, float] = {}
        for fns, field in ((task.metric_fns, "prediction"), (task.score_metric_fns, "score")):
            for fn in fns:
                metrics.update(_metric_values(task, fn, data.targets, outputs[field]))
        with (self.output_dir / f"{task.name}-metrics.jsonl").open("a", encoding="utf-8") as f:
            f.write(json.dumps({"step": step, "metrics": metrics}) + "\n")
        return metrics
