"""The training loop itself: steps on batches, with everything else done by hooks.

Saving, evaluation, metrics, the progress bar, non-finite checks and preemption are hooks
(`t5forge.run.hooks`) that `train` lists after the user's, as Levanter's trainer runs its
checkpointer and loggers as hooks. The loop only reads a batch, dispatches the step and calls
the hooks in order; JAX runs the step asynchronously, so `on_dispatch` comes while the device is
still busy and `on_step` only for the hooks that are due (the non-finite hook makes sure those
see a step whose outcome is known).
"""

from __future__ import annotations

import sys

from t5forge.run.hooks import RunContext


def run_steps(run: RunContext, batches) -> None:
    """Trains `run.state` on `batches` up to `run.total_steps`, or until a hook stops it."""
    run.notify("on_start")
    while run.step < run.total_steps:
        run.data_position = batches.get_state()  # in case this step is refused: the last good
        run.batch = next(batches)
        run.state, run.metrics = run.trainer.train_step(
            run.state, run.batch, expected_step=run.step
        )
        run.step += 1
        run.notify("on_dispatch", run.step)
        for hook in run.hooks:
            if hook.due(run, run.step):
                hook.on_step(run, run.step)
        if run.preempted:
            break
        if run.stop_reason:
            print(f"{run.stop_reason}; saving step {run.step}", file=sys.stderr)
            break
    run.notify("on_last_step", run.step)
    run.notify("on_end", run.step)
