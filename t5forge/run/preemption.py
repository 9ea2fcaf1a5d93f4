"""Preemption: SIGTERM and Ctrl-C (SIGINT) become a save and a stop after the current step.

A run stopped this way raises `Preempted` once its checkpoint is on disk, so that neither a
scheduler nor a Python caller mistakes it for a finished run: the command line exits with
128 + the signal number (143 for SIGTERM, 130 for SIGINT), the shells' convention for "ended by
this signal", and rerunning the same command resumes.
"""

from __future__ import annotations

import signal
import sys

import jax
from jax.experimental import multihost_utils

from t5forge.run.hooks import Hook, RunContext


class Preempted(Exception):
    """The run saved `step` (in `checkpoint`) and stopped because it received `signum`."""

    def __init__(self, signum: int, step: int, checkpoint):
        self.signum, self.step, self.checkpoint = signum, step, checkpoint
        self.exit_code = 128 + signum
        super().__init__(
            f"{signal.Signals(signum).name}: saved step {step} in {checkpoint} and "
            "stopped; rerun the same command to resume"
        )


class StopSignal:
    """Turns SIGTERM (preemption) and SIGINT into a stop after the current step.

    A second Ctrl-C interrupts at once (KeyboardInterrupt), for a user who will not wait for
    the step and the save. With several processes, each must stop (and save) at the same step,
    or the collectives of the next step hang; JAX's preemption service (it installs its own
    SIGTERM handler at `jax.distributed.initialize`) propagates one host's notice and names that
    common step. The previous handlers come back at `restore()`, so a library caller's own
    handlers survive.
    """

    def __init__(self):
        self.received = False
        self.signum: int | None = None
        self._distributed = jax.process_count() > 1
        self._previous: dict[int, object] = {}
        if not self._distributed:
            for signum in (signal.SIGTERM, signal.SIGINT):
                try:
                    self._previous[signum] = signal.signal(signum, self._handle)
                except ValueError:  # not the main thread: nobody can send us the signal anyway
                    break

    def _handle(self, signum, frame):
        if signum == signal.SIGINT and self.signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.received = True
        self.signum = self.signum or signum

    def after_step(self, step: int) -> bool:
        """Whether to save `step` and stop; every process must call it after every step."""
        if self._distributed and multihost_utils.reached_preemption_sync_point(step):
            self.received = True
            self.signum = self.signum or signal.SIGTERM
        return self.received

    def restore(self) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous = {}


class Preemption(Hook):
    """Stops the run, saving, after the step at which `stop_signal` says to."""

    def __init__(self, stop_signal: StopSignal):
        self.signal = stop_signal

    def due(self, run: RunContext, step: int) -> bool:
        return run.preempted

    def on_dispatch(self, run: RunContext, step: int) -> None:
        run.preempted = self.signal.after_step(step)

    def on_step(self, run: RunContext, step: int) -> None:
        name = signal.Signals(self.signal.signum).name if self.signal.signum else "SIGTERM"
        print(f"{name}: saving step {step} and exiting", file=sys.stderr)
