"""What a training run leaves for people to read: TensorBoard events, metrics.jsonl,
config.gin, model-info.txt (T5X's format) and a PNG of the training curves.

T5X users know these files by name and layout, so we keep them: events under
`train/`, `training_eval/<task>/` and `inference_eval/`, one JSON line per logged
step in `metrics.jsonl` (easy to grep and plot without TensorBoard).
"""

from __future__ import annotations

import io
import json
import math
import os
from collections.abc import Mapping

import numpy as np

from t5forge import event_files, storage

METRICS_FILE = "metrics.jsonl"
PLOT_FILE = "training_curves.png"
# What the curve plot shows besides each task's inference metrics (BLEU, ROUGE, accuracy...).
_CURVE_METRICS = ["loss", "loss_per_nonpadding_target_token", "accuracy", "learning_rate"]


def _flatten(tree) -> dict[str, object]:
    """Flattens any pytree (nested dicts, optimizer states) into {'a/b/c': leaf}, T5X's naming.

    Tuples of axis names and shape tuples count as leaves, not containers.
    """
    from t5forge.models import param_names

    def is_leaf(node):
        return isinstance(node, tuple) and all(isinstance(x, (str, int, type(None))) for x in node)

    return param_names.named_leaves(tree, is_leaf=is_leaf)


def _shape_text(shape, axes) -> str:
    if axes and len(axes) == len(shape):
        return "(" + ", ".join(f"{a}={d}" for a, d in zip(axes, shape)) + ")"
    return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def _variable_lines(shapes: Mapping, axes: Mapping | None, specs: Mapping | None, prefix: str):
    flat_shapes = _flatten(shapes)
    flat_axes = _flatten(axes) if axes else {}
    flat_specs = _flatten(specs) if specs else {}
    total = 0
    lines = []
    for name in sorted(flat_shapes):
        shape = tuple(getattr(flat_shapes[name], "shape", flat_shapes[name]))
        size = int(np.prod(shape)) if shape else 1
        total += size
        full_name = f"{prefix}{name}"
        spec = flat_specs.get(name, "None")
        lines.append(
            f"Variable {full_name:<80} size {size:<12} "
            f"shape {_shape_text(shape, flat_axes.get(name)):<40} partition spec {spec}"
        )
    return lines, total


def write_model_info(
    path: str | os.PathLike,
    param_shapes: Mapping,
    param_axes: Mapping | None = None,
    param_specs: Mapping | None = None,
    optimizer_state_shapes=None,
) -> int:
    """Writes T5X's model-info.txt: one line per variable, the total, then optimizer state.

    `param_shapes` leaves are arrays, ShapeDtypeStructs or shape tuples. Returns the
    total number of parameters.
    """
    lines, total = _variable_lines(param_shapes, param_axes, param_specs, prefix="")
    lines.append(f"Total number of parameters: {total}")
    lines.append("")
    if optimizer_state_shapes:
        opt_lines, _ = _variable_lines(optimizer_state_shapes, None, None, prefix="state/")
        lines.extend(opt_lines)
    storage.write_atomically(path, "\n".join(lines) + "\n")
    return total


class MetricsWriter:
    """Writes scalars to TensorBoard (one event dir per split) and to metrics.jsonl.

    `split` is T5X's summary directory name: 'train', 'training_eval/<task>' or
    'inference_eval'. Only process 0 should write; pass `enabled=False` elsewhere.

    A training run calls `forget_after(step)` when it starts from a checkpoint of that step
    (-1 when it starts afresh): an earlier attempt's rows past it would otherwise repeat.
    """

    def __init__(self, model_dir: str | os.PathLike, enabled: bool = True):
        self.model_dir = storage.path(model_dir)
        self.enabled = enabled
        self._writers: dict[str, object] = {}
        self._purge_step: int | None = None

    def forget_after(self, step: int) -> None:
        """Drops metrics.jsonl rows logged after `step` and hides the TensorBoard events past it
        (TensorBoard's purge step), as the run is about to log those steps again."""
        if self.enabled and (self.model_dir / METRICS_FILE).exists():
            purge_metrics_after(self.model_dir, step)
            self._purge_step = step + 1

    def _writer(self, split: str):
        if split not in self._writers:
            self._writers[split] = event_files.summary_writer(
                self.model_dir / split, purge_step=self._purge_step
            )
        return self._writers[split]

    def write_scalars(self, step: int, metrics: Mapping[str, float], split: str = "train"):
        if not self.enabled or not metrics:
            return
        values = {k: float(v) for k, v in metrics.items()}
        writer = self._writer(split)
        for name, value in values.items():
            writer.add_scalar(name, value, global_step=int(step))
        writer.flush()
        record = {
            "step": int(step),
            "split": split,
            **{k: _json_number(v) for k, v in values.items()},
        }
        with (self.model_dir / METRICS_FILE).open("a") as f:
            f.write(json.dumps(record) + "\n")

    def write_text(self, step: int, tag: str, text: str, split: str = "inference_eval"):
        if self.enabled:
            self._writer(split).add_text(tag, text, global_step=int(step))

    def close(self):
        for writer in self._writers.values():
            writer.close()
        self._writers.clear()


def purge_metrics_after(model_dir: str | os.PathLike, step: int) -> int:
    """Drops metrics.jsonl rows logged after `step` (rewritten atomically); returns how many."""
    path = storage.path(model_dir) / METRICS_FILE
    lines = path.read_text().splitlines(keepends=True)
    kept = [line for line in lines if line.strip() and _row_step(line) <= step]
    if len(kept) != len(lines):
        storage.write_atomically(path, "".join(kept))
    return len(lines) - len(kept)


def _row_step(line: str) -> float:
    try:
        return int(json.loads(line)["step"])
    except (ValueError, KeyError, TypeError):
        return math.inf  # a torn last line from a killed run: dropped


def _json_number(value: float):
    """NaN/Inf are not JSON; keep them readable as strings."""
    return value if math.isfinite(value) else str(value)


def read_metrics(model_dir: str | os.PathLike) -> list[dict]:
    """All records of metrics.jsonl, in the order they were written."""
    path = storage.path(model_dir) / METRICS_FILE
    if not path.exists():
        return []
    with path.open() as f:
        return [json.loads(line) for line in f if line.strip()]


def curve_series(records: list[dict]) -> dict[tuple[str, str], list[tuple[int, float]]]:
    """(split, panel) -> [(step, value)] for the curve plot.

    A task metric of inference_eval (BLEU, accuracy in 0-100...) gets a panel per task, named
    '<task>: <metric>', apart from the 0-1 token accuracy of the train and training_eval splits.
    """
    series: dict[tuple[str, str], list[tuple[int, float]]] = {}
    for record in records:
        for key, value in record.items():
            if key in ("step", "split") or not isinstance(value, (int, float)):
                continue
            split = record["split"]
            if split.startswith("inference_eval"):
                key = f"{split.partition('/')[2] or split}: {key}"
            elif key not in _CURVE_METRICS:
                continue
            series.setdefault((split, key), []).append((record["step"], value))
    return series


def plot_training_curves(model_dir: str | os.PathLike, output: str | os.PathLike | None = None):
    """Draws loss (train and eval) and every eval metric against step into a PNG.

    Returns the path written, or None when there is nothing to plot yet.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = curve_series(read_metrics(model_dir))
    if not series:
        return None
    panels = sorted(
        {name for _, name in series},
        key=lambda n: (
            n not in _CURVE_METRICS,
            _CURVE_METRICS.index(n) if n in _CURVE_METRICS else 0,
            n,
        ),
    )
    cols = min(3, len(panels))
    rows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.5 * rows), squeeze=False)
    for ax, panel in zip(axes.flat, panels):
        for (split, name), points in sorted(series.items()):
            if name != panel:
                continue
            steps, values = zip(*points)
            ax.plot(steps, values, marker="." if len(points) < 30 else None, label=split)
        ax.set_title("token accuracy" if panel == "accuracy" else panel)
        ax.set_xlabel("step")
        if panel == "loss":
            ax.set_yscale("log")
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    fig.tight_layout()
    out = storage.path(output) if output else storage.path(model_dir) / PLOT_FILE
    png = io.BytesIO()
    fig.savefig(png, dpi=90, format="png")
    plt.close(fig)
    storage.write_atomically(out, png.getvalue())
    return out
