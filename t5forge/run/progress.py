"""The training progress bar: one tick per dispatched step, the last logged loss and tokens/s."""

from __future__ import annotations

from t5forge.run.hooks import Hook, RunContext


class ProgressBar(Hook):
    """A tqdm bar from the restored step to TRAIN_STEPS (none shown unless `enabled`);
    `close()` it whatever happens."""

    def __init__(self, enabled: bool):
        self.enabled, self.bar = enabled, None

    def due(self, run: RunContext, step: int) -> bool:
        return False  # counting a step needs no wait for it

    def on_start(self, run: RunContext) -> None:
        from tqdm import tqdm

        self.bar = tqdm(
            total=run.total_steps,
            initial=run.step,
            unit="step",
            dynamic_ncols=True,
            desc="train",
            disable=not self.enabled,
        )

    def on_dispatch(self, run: RunContext, step: int) -> None:
        self.bar.update(1)

    def on_metrics(self, run: RunContext, step: int, metrics: dict) -> None:
        self.bar.set_postfix(
            loss=f"{metrics['loss']:.4g}",
            tok_s=f"{metrics['timing/target_tokens_per_second']:.0f}",
        )

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
