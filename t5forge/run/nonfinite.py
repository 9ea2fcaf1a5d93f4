"""Non-finite steps: the trainer refuses a step whose loss, parameters or optimizer state come
out non-finite; this hook stops the run there with the last good state saved (T5X's
TerminateOnNanAction), or skips a bounded number of such batches.

The last good state is one whose own loss was finite: the input of the last applied step.
The state that step produced is finite but may already have diverged (with a huge learning
rate, the step after it is the one whose loss is NaN), so keeping it would make the suggested
rerun fail again at once. A small state's copies are kept on the device for this (the
input of each step until the next one is known good), a large one falls back to the newest
checkpoint that meets the rule; checkpoints after it are moved aside, and the message says
which state was kept.

Whether a step was applied is a flag on the device. Reading it waits for the step, so it is
read one step late (while the next step runs) unless a hook is due at the step, which must then
see its outcome.
"""

from __future__ import annotations

import sys

import jax
import jax.numpy as jnp

from t5forge.errors import T5ForgeError
from t5forge.run.hooks import Hook, RunContext
from t5forge.training.trainer import APPLIED

DIVERGED_SUFFIX = ".nonfinite"
# Copies of a train state up to this size are kept on the device (at most three at a time).
KEEP_STATE_BYTES = 256 << 20


class NonFiniteSteps(Hook):
    """Stops at a refused step, saving the last good state, after `max_skipped` skipped ones."""

    def __init__(self, max_skipped: int, checkpointing, keep_state_bytes: int = KEEP_STATE_BYTES):
        self.max_skipped, self.checkpointing = max_skipped, checkpointing
        self.keep_state_bytes = keep_state_bytes
        self.skipped: list[int] = []
        self.pending = None  # (step, its `applied` flag on device, the data position before it)
        self.keeping = False
        self.copies: dict[int, tuple] = {}  # step -> (state copy, data position after it)
        self.good: tuple | None = None  # (step, state, position) whose own loss was finite

    def due(self, run: RunContext, step: int) -> bool:
        return bool(self.max_skipped)  # a skipped step must be known before the next one runs

    def on_start(self, run: RunContext) -> None:
        size = sum(leaf.nbytes for leaf in jax.tree.leaves(run.state))
        self.keeping = size <= self.keep_state_bytes
        self._keep(run, run.step)

    def on_dispatch(self, run: RunContext, step: int) -> None:
        if self.pending is not None:
            self._settle(run)
        self.pending = (step, run.metrics.pop(APPLIED), run.data_position)
        if run.preempted or any(hook.due(run, step) for hook in run.hooks):
            self._settle(run)
        self._keep(run, step)  # before the next step is dispatched (it donates the state)

    def scalars(self) -> dict:
        """The count of skipped steps, logged with the train metrics when skipping is allowed."""
        return {"nonfinite_steps_skipped": float(len(self.skipped))} if self.max_skipped else {}

    def _keep(self, run: RunContext, step: int) -> None:
        if self.keeping:
            position = self.checkpointing.train_iter.get_state()
            self.copies[step] = (jax.tree.map(jnp.copy, run.state), position)

    def _settle(self, run: RunContext) -> None:
        """Acts on whether the pending step was applied: a refused (non-finite) step stops the
        run with the last good state saved, or is skipped within the allowed budget."""
        done_step, applied, position = self.pending
        self.pending = None
        if bool(jax.device_get(applied)):
            # Its input's loss was finite: that input is now the last good state.
            if done_step - 1 in self.copies:
                state, _ = self.copies[done_step - 1]
                self.good = (done_step - 1, state, position)
            self.copies = {s: kept for s, kept in self.copies.items() if s >= done_step}
            return
        self.skipped.append(done_step)
        shardings = run.trainer.state_shardings
        if len(self.skipped) > self.max_skipped:
            kept = self._keep_last_good(run, done_step)
            raise T5ForgeError(_message(done_step, self.skipped, kept))
        print(
            f"warning: step {done_step} gave non-finite values; its batch is skipped "
            f"({len(self.skipped)} of at most {self.max_skipped})",
            file=sys.stderr,
        )
        run.state = run.state.replace(step=jax.device_put(done_step, shardings.step))
        self.copies.pop(done_step, None)  # the refused output: replaced by `_keep` after this

    def _keep_last_good(self, run: RunContext, refused: int) -> str:
        """Leaves the newest state whose own loss was finite as the newest checkpoint: the copy
        kept in memory (saved), else the newest checkpoint before the last applied step's
        output; checkpoints after it are moved aside. Says which."""
        ckpt = self.checkpointing.ckpt
        ckpt.wait_until_finished()
        if self.good is not None:
            step, state, position = self.good
            kept = f"the state of step {step}, the last whose own loss was finite (kept in memory)"
        else:
            # Every step up to the refused one's predecessor was applied: each input's loss was
            # finite, but the predecessor's output is the state whose loss was not.
            step = max((s for s in ckpt.all_steps() if s <= refused - 2), default=None)
            kept = (
                f"checkpoint_{step}, the newest saved state whose own loss was finite"
                if step is not None
                else "no saved state had a finite loss of its own, so a rerun starts over"
            )
        moved = [
            ckpt.move_aside(s, DIVERGED_SUFFIX).name
            for s in ckpt.all_steps()
            if step is None or s > step
        ]
        if self.good is not None and step not in ckpt.all_steps():
            self.checkpointing.save(run, step, force=True, position=position, of=state)
            ckpt.wait_until_finished()
        aside = f"; moved aside: {', '.join(moved)}" if moved else ""
        return f"{kept}, in {ckpt.model_dir}{aside}"


def _message(step: int, skipped: list[int], kept: str) -> str:
    allowed = len(skipped) - 1
    return (
        f"step {step} gave a non-finite loss, parameter or optimizer value"
        + (f" (after {allowed} skipped: steps {skipped[:-1]})" if allowed else "")
        + f"; it was not applied. The last good state is {kept}. Lower the learning rate "
        "or use float32 activations, then rerun the same command to resume from it (or allow "
        "skipping a few bad batches with --gin.train.max_skipped_nonfinite_steps=N)"
    )
