"""Evaluation while training: before the first step, every eval_period steps and at the end.

Each evaluation runs the teacher-forced training eval and the inference eval that are set
(`t5forge.run.training_and_inference_eval`), redraws training_curves.png and hands every hook the flat results.
"""

from __future__ import annotations

from collections.abc import Callable

from t5forge.errors import T5ForgeError
from t5forge.run.hooks import Hook, RunContext
from t5forge.run.training_and_inference_eval import converter_for, training_eval
from t5forge.training import summaries


class PeriodicEvaluation(Hook):
    """Evaluates every `period` steps (0: never), and at the step the run stops unless it was
    interrupted by a signal; also at the start when asked, or when a fresh run decodes."""

    def __init__(
        self,
        period: int,
        train_eval_cfg,
        eval_steps: int,
        inference,
        before_training: bool,
        is_chief: bool,
        interrupted: Callable[[], bool],
    ):
        self.period, self.train_eval_cfg, self.eval_steps = period, train_eval_cfg, eval_steps
        self.inference, self.before_training, self.is_chief = inference, before_training, is_chief
        self.interrupted = interrupted
        self.results: dict = {}  # the last evaluation's, whenever it ran
        self.evaluated_at: int | None = None  # the step of the last periodic or final one
        self.start_step = 0

    def due(self, run: RunContext, step: int) -> bool:
        return bool(self.period) and step % self.period == 0 and step != self.start_step

    def on_start(self, run: RunContext) -> None:
        self.start_step = run.step
        if self.before_training or (run.step == 0 and self.period and self.inference is not None):
            self.results = self.evaluate(run)

    def on_step(self, run: RunContext, step: int) -> None:
        self.results, self.evaluated_at = self._evaluate_or_save(run), step

    def on_last_step(self, run: RunContext, step: int) -> None:
        if (
            not self.interrupted()
            and self.period
            and step % self.period
            and step != self.start_step
        ):
            self.results, self.evaluated_at = self._evaluate_or_save(run), step

    def _evaluate_or_save(self, run: RunContext) -> dict:
        """Evaluates; when the evaluation is refused (a task's metric raised, a missing
        split...), the step it would have evaluated is saved first, so the user's fix resumes
        from there instead of from the last periodic checkpoint."""
        try:
            return self.evaluate(run)
        except T5ForgeError:
            run.save_checkpoint()
            raise

    def results_at(self, step: int) -> dict | None:
        """The results of the periodic or final evaluation at `step`, if one ran there."""
        return self.results if self.evaluated_at == step else None

    def evaluate(self, run: RunContext) -> dict:
        """Evaluates the current parameters now; returns (and hands the hooks) flat results."""
        results = {}
        if self.train_eval_cfg is not None:
            results.update(
                training_eval(
                    run.trainer,
                    run.state.params,
                    self.train_eval_cfg,
                    self.eval_steps,
                    run.writer,
                    run.step,
                    converter_for(run.model, False),
                )
            )
        if self.inference is not None:
            results.update(self.inference.run(run.step, run.state.params))
        if self.is_chief:
            summaries.plot_training_curves(run.model_dir)
        flat = _flat(results)
        run.notify("on_eval", run.step, flat)
        return flat


def _flat(results: dict) -> dict:
    """{'inference_eval/en_de/bleu': 12.3, ...} from nested per-task results."""
    flat = {}
    for key, value in results.items():
        if isinstance(value, dict):
            for inner, number in _flat(value).items():
                flat[f"{key}/{inner}"] = number
        else:
            flat[key] = value
    return flat
