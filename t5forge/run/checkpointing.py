"""Saving while training: the checkpoint period, the last step, and the data position.

A checkpoint holds the train state, every process's data position (so a resumed run reads the
same batches next) and the evaluation results of its step (for keep-best).
"""

from __future__ import annotations

import json
from collections.abc import Callable

import jax
import numpy as np
from jax.experimental import multihost_utils

from t5forge.run.hooks import Hook, RunContext


class Checkpointing(Hook):
    """Saves every `period` steps and at the step the run stops, unless that is on disk."""

    def __init__(
        self,
        ckpt,
        period: int,
        train_iter,
        metadata: dict,
        remote,
        eval_results: Callable[[int], dict | None],
    ):
        self.ckpt, self.period, self.train_iter = ckpt, period, train_iter
        self.metadata, self.remote, self.eval_results = metadata, remote, eval_results

    def due(self, run: RunContext, step: int) -> bool:
        return step % self.period == 0

    def on_step(self, run: RunContext, step: int) -> None:
        self.save(run, step, metrics=self.eval_results(step))

    def on_last_step(self, run: RunContext, step: int) -> None:
        if self.ckpt.latest_step() != step:
            self.save(run, step, metrics=self.eval_results(step) or None, force=True)

    def save(self, run: RunContext, at_step, metrics=None, force=False, position=None, of=None):
        """Saves `of` (default: the run's state) as `at_step`, at the checkpoint period or
        when forced; `position` is the data position to record (default: the current one)."""
        if not force and at_step % self.period:
            return False  # skip gathering the data positions for a step that is not saved
        saved = self.ckpt.save(
            at_step,
            run.state if of is None else of,
            _data_positions(self.train_iter.get_state() if position is None else position),
            metadata=self.metadata,
            metrics=metrics,
            force=force,
        )
        if saved and self.remote:
            self.remote.saving(at_step)  # the earlier checkpoints are final now: copied up
        return saved


def _data_positions(local_state: dict) -> dict:
    """Every process's iterator state, for the checkpoint (each process reads its own shard).

    Orbax writes JSON items from process 0 only, so the states are all-gathered first (as
    padded UTF-8 bytes: collectives need equal shapes on every process).
    """
    local = json.dumps(local_state).encode()
    if jax.process_count() == 1:
        encoded = [local]
    else:
        lengths = multihost_utils.process_allgather(np.int32(len(local)))
        padded = np.zeros(int(lengths.max()), np.uint8)
        padded[: len(local)] = np.frombuffer(local, np.uint8)
        rows = multihost_utils.process_allgather(padded)
        encoded = [row[:length].tobytes() for row, length in zip(rows, lengths)]
    return {"process_count": len(encoded), "process_states": [json.loads(e) for e in encoded]}
