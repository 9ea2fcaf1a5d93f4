"""`seqio.loggers`: SeqIO's evaluation loggers for code that calls them itself. t5forge's
commands write their own logs, TensorBoard events and JSONL (T5X's `logger_cls` binding is
accepted and needs none of these); a script that evaluates with its own loop can still log
through SeqIO's classes.

A logger is called as `logger(task_name, step, metrics, dataset, inferences, targets)`;
metric values are numbers (t5forge's metric functions return floats) or objects with a
`.value` (SeqIO's Scalar).
"""

from __future__ import annotations

import abc
import itertools
import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from t5forge import event_files, storage

__all__ = ["JSONLogger", "Logger", "PyLoggingLogger", "TensorBoardLogger"]


def _number(value) -> float:
    return float(np.asarray(getattr(value, "value", value)))


def _json_value(value):
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, Mapping):
        return {k: _json_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_value(v) for v in value]
    return value


class Logger(abc.ABC):
    """SeqIO's base class: `output_dir`, and a call per task and evaluation step."""

    def __init__(self, output_dir):
        self.output_dir = output_dir

    @abc.abstractmethod
    def __call__(
        self,
        task_name: str,
        step: int | None,
        metrics: Mapping[str, Any],
        dataset: Iterable[Mapping[str, Any]] | None,
        inferences: Mapping[str, Sequence[Any]] | None,
        targets: Sequence[Any] | None,
    ) -> None:
        """Logs one evaluation of one task."""


class PyLoggingLogger(Logger):
    """'<task>/<metric> at step <n>: <value>' lines through Python's logging."""

    def __init__(self, output_dir, level: int = logging.INFO):
        super().__init__(output_dir)
        self.level = level

    def __call__(self, task_name, step, metrics, dataset, inferences, targets) -> None:
        for name, value in metrics.items():
            logging.log(
                self.level, "%s/%s at step %d: %.3f", task_name, name, step or -1, _number(value)
            )


class TensorBoardLogger(Logger):
    """Scalars `eval/<metric>` in `<output_dir>/<task>`, as SeqIO writes them."""

    def __init__(self, output_dir):
        super().__init__(output_dir)
        self._writers: dict[str, Any] = {}

    def __call__(self, task_name, step, metrics, dataset, inferences, targets) -> None:
        directory = str(storage.path(self.output_dir) / task_name)
        if directory not in self._writers:
            self._writers[directory] = event_files.summary_writer(directory)
        writer = self._writers[directory]
        for name, value in metrics.items():
            writer.add_scalar(f"eval/{name}", _number(value), -1 if step is None else step)
        writer.flush()


class JSONLogger(Logger):
    """`<task>-metrics.jsonl` (a line per step) and `<task>-<step:06>.jsonl` (each example
    with its target and inferences; the first `write_n_results` when set)."""

    def __init__(self, output_dir, write_n_results: int | None = None, json_encoder_cls=None):
        super().__init__(output_dir)
        self.write_n_results = write_n_results
        self.json_encoder_cls = json_encoder_cls

    def __call__(self, task_name, step, metrics, dataset, inferences, targets) -> None:
        step = -1 if step is None else step
        directory = storage.path(self.output_dir)
        directory.mkdir(parents=True, exist_ok=True)
        if metrics:
            line = {"step": step, **{name: _number(v) for name, v in metrics.items()}}
            path = directory / f"{task_name}-metrics.jsonl"
            previous = path.read_text() if path.exists() else ""
            path.write_text(previous + json.dumps(line, cls=self.json_encoder_cls) + "\n")
        if self.write_n_results == 0 or not (inferences and targets and dataset):
            return
        kinds = [k for k in inferences if k != "aux_value"]
        rows = itertools.zip_longest(dataset, targets, *(inferences[k] for k in kinds))
        if self.write_n_results:
            rows = itertools.islice(rows, self.write_n_results)
        lines = []
        for example, target, *results in rows:
            if example is None:
                continue
            record = {"input": example, "target": target, **dict(zip(kinds, results))}
            lines.append(json.dumps(_json_value(record), cls=self.json_encoder_cls))
        (directory / f"{task_name}-{step:06}.jsonl").write_text("".join(f"{x}\n" for x in lines))
