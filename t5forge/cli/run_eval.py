"""The two evaluations a T5X run does while training, shared by `train` and `eval`.

training_eval: teacher-forced loss and accuracy on a task's eval split (cheap, every
eval_period). inference_eval: decode (or score) the eval split and compute the task's
metrics, e.g. BLEU, with predictions written as JSONL.
"""

from __future__ import annotations

from pathlib import Path

import jax
import numpy as np

from t5forge.cli.run_config import DatasetConfig
from t5forge.training.summaries import MetricsWriter


def converter_for(model, pack: bool):
    """The feature converter matching the model's architecture."""
    from t5forge.data import feature_converters as fc
    from t5forge.models.model import DecoderOnlyModel

    if isinstance(model, DecoderOnlyModel):
        return fc.PrefixLMFeatureConverter(pack=pack)
    return fc.EncDecFeatureConverter(pack=pack)


def _task_names(name: str) -> list[str]:
    from t5forge.data.tasks import get_mixture_or_task

    return [task.name for task in get_mixture_or_task(name).tasks]


def training_eval(trainer, params, cfg: DatasetConfig, eval_steps: int, writer: MetricsWriter,
                  step: int, converter) -> dict:
    """Mean loss and token accuracy over up to `eval_steps` batches of each task's eval split."""
    from t5forge.data.pipeline import make_batch_iterator

    results = {}
    for task_name in _task_names(cfg.mixture_or_task_name):
        iterator = make_batch_iterator(
            task_name, cfg.split, dict(cfg.task_feature_lengths),
            cfg.batch_size // jax.process_count(), converter, seed=0,
            shard_index=jax.process_index(), num_shards=jax.process_count(),
            shuffle=False, num_epochs=1, use_cached=cfg.use_cached,
        )
        totals: dict[str, float] = {}
        batches = 0
        for batch in iterator:
            metrics = jax.device_get(trainer.eval_step(params, batch))
            for key, value in metrics.items():
                totals[key] = totals.get(key, 0.0) + float(value)
            batches += 1
            if eval_steps and batches >= eval_steps:
                break
        iterator.close()
        if batches:
            task_metrics = {key: value / batches for key, value in totals.items()}
            writer.write_scalars(step, task_metrics, split=f"training_eval/{task_name}")
            results[f"training_eval/{task_name}"] = task_metrics
    return results


class InferenceEvaluation:
    """Runs the task's metrics on decoded predictions (and scores, for score metrics)."""

    def __init__(self, model, cfg: DatasetConfig, model_dir, writer: MetricsWriter,
                 max_decode_length: int | None = None, output_dir=None, method: str = "greedy"):
        from t5forge.data.evaluation import Evaluator

        self.model = model
        self.writer = writer
        self.method = method
        lengths = cfg.task_feature_lengths or {}
        self.max_decode_length = max_decode_length or lengths.get("targets", 256)
        self.evaluator = Evaluator(
            cfg.mixture_or_task_name, lengths or None, cfg.batch_size,
            Path(output_dir or Path(model_dir) / "inference_eval"),
            split=cfg.split, converter=converter_for(model, pack=False), use_cached=cfg.use_cached,
        )

    def predict_fn(self, params):
        def predict(batch):
            tokens = self.model.predict_batch(
                params, batch, method=self.method, max_decode_length=self.max_decode_length)
            return np.asarray(jax.device_get(tokens))

        return predict

    def score_fn(self, params):
        return lambda batch: np.asarray(jax.device_get(self.model.score_batch(params, batch)))

    def run(self, step: int, params) -> dict:
        results = self.evaluator.evaluate(
            predict_fn=self.predict_fn(params), score_fn=self.score_fn(params), step=step)
        flat = {}
        for task_name, metrics in results.items():
            self.writer.write_scalars(step, metrics, split=f"inference_eval/{task_name}")
            flat[f"inference_eval/{task_name}"] = metrics
        return flat
