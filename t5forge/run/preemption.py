"""Preemption: SIGTERM (and Ctrl-C) become a save and a stop after the current step."""

from __future__ import annotations

import signal

import jax
from jax.experimental import multihost_utils


class StopSignal:
    """Turns SIGTERM (preemption) into a stop after the current step.

    With several processes, each must stop (and save) at the same step, or the collectives of
    the next step hang; JAX's preemption service (it installs its own SIGTERM handler at
    `jax.distributed.initialize`) propagates one host's notice and names that common step.
    The previous handler comes back at `restore()`, so a library caller's own handler survives.
    """

    def __init__(self):
        self.received = False
        self._distributed = jax.process_count() > 1
        self._previous = None
        if not self._distributed:
            try:
                self._previous = signal.signal(signal.SIGTERM, self._handle)
            except ValueError:  # not the main thread: nobody can send us the signal anyway
                self._previous = None

    def _handle(self, signum, frame):
        self.received = True

    def after_step(self, step: int) -> bool:
        """Whether to save `step` and stop; every process must call it after every step."""
        if self._distributed and multihost_utils.reached_preemption_sync_point(step):
            self.received = True
        return self.received

    def restore(self) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)
            self._previous = None
