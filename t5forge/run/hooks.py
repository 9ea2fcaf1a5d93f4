"""Hooks: the objects the training loop calls at fixed points (T5X's "actions", generalised).

The loop's own saving, evaluation, metrics, progress bar, non-finite checks and preemption are
hooks too (`t5forge.run.checkpointing`, ...), listed after the user's. A hook subclasses `Hook`
and overrides what it needs; every hook sees each call in list order. The loop calls

- `on_start(run)` once, after the state is built or restored;
- `on_dispatch(run, step)` after every step, as soon as it is dispatched to the device and
  before its outcome is known (JAX runs it asynchronously): progress, timing;
- `on_step(run, step)` after every `every`-th step (`due` decides), once the step is known to
  have been applied (custom logging, extra checkpoints, ...);
- `on_metrics(run, step, metrics)` whenever train metrics reach the host (every stats_period);
- `on_eval(run, step, results)` after each evaluation, with flat results
  (`{'inference_eval/<task>/accuracy': 71.2, 'training_eval/<task>/loss': 2.1, ...}`);
- `on_last_step(run, step)` once the loop stops, for the step it stopped at (a last evaluation
  and save happen here);
- `on_end(run, step)` once, when the loop ends for any reason.

`run` (a `RunContext`) gives the model, the current state and step, the model dir, the metrics
writer, and `stop(reason)` / `save_checkpoint()` / `evaluate()`. With several processes every
hook must decide the same on every process (eval results are global, so decisions based on
them are).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from t5forge.errors import ConfigError


class Hook:
    """Base class of training-loop hooks; every method is optional."""

    every: int = 1

    def due(self, run: RunContext, step: int) -> bool:
        """Whether `on_step` runs after `step`: every `every`-th step unless overridden. The
        loop learns whether a step was applied before any hook that is due at it runs."""
        return step % max(self.every, 1) == 0

    def on_start(self, run: RunContext) -> None:
        pass

    def on_dispatch(self, run: RunContext, step: int) -> None:
        pass

    def on_step(self, run: RunContext, step: int) -> None:
        pass

    def on_metrics(self, run: RunContext, step: int, metrics: dict) -> None:
        pass

    def on_eval(self, run: RunContext, step: int, results: dict) -> None:
        pass

    def on_last_step(self, run: RunContext, step: int) -> None:
        pass

    def on_end(self, run: RunContext, step: int) -> None:
        pass


class RunContext:
    """What a hook may see and do while `train` runs.

    The loop keeps `state` and `step` current; `batch` and `metrics` (still on the device) are
    the last step's, and `data_position` is where the data was before that batch was read.
    `hooks` are all of the run's hooks in call order; `preempted` turns true once SIGTERM or
    SIGINT has been acted on (the step is saved and the loop stops).
    """

    def __init__(
        self,
        *,
        model,
        trainer,
        model_dir,
        writer,
        state,
        total_steps: int,
        hooks: Sequence[Hook],
        save: Callable[[RunContext], Any],
        evaluate: Callable[[RunContext], dict],
    ):
        self.model = model
        self.trainer = trainer
        self.model_dir = model_dir
        self.writer = writer
        self.state = state
        self.step = int(state.step)
        self.total_steps = total_steps
        self.hooks = tuple(hooks)
        self.batch = self.metrics = self.data_position = None
        self.preempted = False
        self.stop_reason: str | None = None
        self._save = save
        self._evaluate = evaluate

    def stop(self, reason: str) -> None:
        """Ends the run after this step; the state is saved and `reason` is reported."""
        self.stop_reason = self.stop_reason or reason

    def save_checkpoint(self) -> None:
        """Saves the current step now, whatever the checkpoint period."""
        self._save(self)

    def evaluate(self) -> dict:
        """Runs the run's evaluations now and returns their flat results."""
        return self._evaluate(self)

    def notify(self, event: str, *args) -> None:
        """Calls `event` (e.g. 'on_eval') on every hook, in order."""
        for hook in self.hooks:
            getattr(hook, event)(self, *args)


class Every(Hook):
    """Calls `fn(run, step)` every `n` steps: `hooks=[Every(500, my_logging)]`."""

    def __init__(self, n: int, fn: Callable[[RunContext, int], None]):
        if n < 1:
            raise ConfigError(f"Every(n) needs n >= 1, got {n}")
        self.every = n
        self.fn = fn

    def on_step(self, run: RunContext, step: int) -> None:
        self.fn(run, step)


class EarlyStopping(Hook):
    """Stops when `metric` has not improved by `min_delta` for `patience` evaluations.

    `metric` is a flat eval-result name, e.g. 'inference_eval/my_task/accuracy' or
    'training_eval/my_task/loss' (then use mode='min').
    """

    def __init__(self, metric: str, mode: str = "max", patience: int = 3, min_delta: float = 0.0):
        if mode not in ("max", "min"):
            raise ConfigError(f"EarlyStopping mode must be 'max' or 'min', not {mode!r}")
        self.metric = metric
        self.sign = 1.0 if mode == "max" else -1.0
        self.patience = patience
        self.min_delta = min_delta
        self.best = -math.inf
        self.best_step: int | None = None
        self.waited = 0

    def on_eval(self, run: RunContext, step: int, results: dict) -> None:
        if self.metric not in results:
            known = ", ".join(sorted(results)) or "none"
            raise ConfigError(
                f"EarlyStopping metric {self.metric!r} is not among the eval results ({known})"
            )
        value = self.sign * float(results[self.metric])
        if value > self.best + self.min_delta:
            self.best, self.best_step, self.waited = value, step, 0
            return
        self.waited += 1
        if self.waited >= self.patience:
            run.stop(
                f"early stopping: {self.metric} has not improved for {self.waited} "
                f"evaluations (best {self.sign * self.best:.4g} at step {self.best_step})"
            )
