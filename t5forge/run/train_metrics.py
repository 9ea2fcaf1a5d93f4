"""The train metrics T5X logs every stats_period steps, with throughput and MFU.

Each logged row has the step's own metrics plus, over the steps since the last row: steps,
sequences and target tokens per second, the non-padding fraction, and on accelerators with a
known peak, model FLOPs utilisation. Rows go to metrics.jsonl and TensorBoard, then to every
hook's `on_metrics`.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import jax
import numpy as np

from t5forge.run.hooks import Hook, RunContext
from t5forge.training import flops
from t5forge.training.trainer import metrics_to_host


class TrainMetrics(Hook):
    """Logs every `period` steps, at the last step and at a preempted one; `extra()` adds
    scalars other hooks keep (the count of skipped non-finite steps)."""

    def __init__(self, period: int, extra: Callable[[], dict]):
        self.period, self.extra = period, extra
        self.last: dict = {}  # the last logged row
        self.process_count = jax.process_count()
        self.step_flops = None

    def due(self, run: RunContext, step: int) -> bool:
        return step % self.period == 0 or step == run.total_steps or run.preempted

    def on_start(self, run: RunContext) -> None:
        self._new_window()
        self.peak_flops = flops.local_peak_flops(run.model.config.dtype)

    def on_dispatch(self, run: RunContext, step: int) -> None:
        if self.step_flops is None and self.peak_flops is not None:
            self.step_flops = _step_flops(run.model.config, run.batch, self.process_count)
        for key, value in _batch_counts(run.batch).items():
            self.counts[key] += value * self.process_count
        self.window_steps += 1
        if self.due(run, step):
            self._log(run, step)

    def _log(self, run: RunContext, step: int) -> None:
        host = metrics_to_host(run.metrics)
        host.update(self.extra())
        elapsed = time.perf_counter() - self.window_start
        host.update(
            {
                "timing/steps_per_second": self.window_steps / elapsed,
                "timing/seqs_per_second": self.counts["seqs"] / elapsed,
                "timing/target_tokens_per_second": self.counts["target_tokens"] / elapsed,
                "non_padding_fraction/loss_weights": self.counts["target_tokens"]
                / max(self.counts["all_tokens"], 1),
            }
        )
        if self.peak_flops is not None:  # accelerators only: no CPU has a known peak
            host["timing/mfu"] = flops.mfu(
                self.step_flops * self.window_steps, elapsed, self.peak_flops, jax.device_count()
            )
        run.writer.write_scalars(step, host, split="train")
        self.last = host
        run.notify("on_metrics", step, host)
        self._new_window()

    def _new_window(self) -> None:
        self.counts = {"target_tokens": 0.0, "all_tokens": 0.0, "seqs": 0.0}
        self.window_start, self.window_steps = time.perf_counter(), 0


def _step_flops(config, batch, process_count: int) -> float:
    """Model FLOPs of one training step over the global batch (its shapes are fixed)."""
    targets = batch["decoder_target_tokens"].shape
    inputs = batch["encoder_input_tokens"].shape[1] if "encoder_input_tokens" in batch else 0
    return flops.model_flops_per_step(config, targets[0] * process_count, inputs, targets[1])


def _batch_counts(batch) -> dict[str, float]:
    weights = np.asarray(batch.get("decoder_loss_weights", batch["decoder_target_tokens"] > 0))
    tokens = np.asarray(batch["decoder_target_tokens"])
    return {
        "target_tokens": float(weights.sum()),
        "all_tokens": float(tokens.size),
        "seqs": float(tokens.shape[0]),
    }
