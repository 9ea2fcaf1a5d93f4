"""Non-finite steps: the trainer refuses a step whose loss, parameters or optimizer state come
out non-finite; this hook stops the run there with the last finite state saved (T5X's
TerminateOnNanAction), or skips a bounded number of such batches.

Whether a step was applied is a flag on the device. Reading it waits for the step, so it is
read one step late (while the next step runs) unless a hook is due at the step, which must then
see its outcome.
"""

from __future__ import annotations

import sys
from pathlib import Path

import jax

from t5forge.errors import T5ForgeError
from t5forge.run.hooks import Hook, RunContext
from t5forge.training.trainer import APPLIED


class NonFiniteSteps(Hook):
    """Stops at a refused step, saving the last good state, after `max_skipped` skipped ones."""

    def __init__(self, max_skipped: int, checkpointing):
        self.max_skipped, self.checkpointing = max_skipped, checkpointing
        self.skipped: list[int] = []
        self.pending = None  # (step, its `applied` flag on device, the data position before it)

    def due(self, run: RunContext, step: int) -> bool:
        return bool(self.max_skipped)  # a skipped step must be known before the next one runs

    def on_dispatch(self, run: RunContext, step: int) -> None:
        if self.pending is not None:
            self._settle(run)
        self.pending = (step, run.metrics.pop(APPLIED), run.data_position)
        if run.preempted or any(hook.due(run, step) for hook in run.hooks):
            self._settle(run)

    def scalars(self) -> dict:
        """The count of skipped steps, logged with the train metrics when skipping is allowed."""
        return {"nonfinite_steps_skipped": float(len(self.skipped))} if self.max_skipped else {}

    def _settle(self, run: RunContext) -> None:
        """Acts on whether the pending step was applied: a refused (non-finite) step stops the
        run with the last good state saved, or is skipped within the allowed budget."""
        done_step, applied, position = self.pending
        self.pending = None
        if bool(jax.device_get(applied)):
            return
        self.skipped.append(done_step)
        shardings = run.trainer.state_shardings
        if len(self.skipped) > self.max_skipped:
            # The steps dispatched after the refused one were refused too: `run.state` is the
            # last good one, and `position` the data position it had reached.
            good = run.state.replace(step=jax.device_put(done_step - 1, shardings.step))
            self.checkpointing.save(run, done_step - 1, force=True, position=position, of=good)
            ckpt = self.checkpointing.ckpt
            ckpt.wait_until_finished()
            raise T5ForgeError(_message(done_step, self.skipped, ckpt.step_dir(done_step - 1)))
        print(
            f"warning: step {done_step} gave non-finite values; its batch is skipped "
            f"({len(self.skipped)} of at most {self.max_skipped})",
            file=sys.stderr,
        )
        run.state = run.state.replace(step=jax.device_put(done_step, shardings.step))


def _message(step: int, skipped: list[int], last_good: Path) -> str:
    allowed = len(skipped) - 1
    return (
        f"step {step} gave a non-finite loss, parameter or optimizer value"
        + (f" (after {allowed} skipped: steps {skipped[:-1]})" if allowed else "")
        + f"; it was not applied, and the last good state (step {step - 1}) is in "
        f"{last_good}. Lower the learning rate or use float32 activations, then rerun the "
        "same command to resume from it (or allow skipping a few bad batches with "
        "--gin.train.max_skipped_nonfinite_steps=N)"
    )
