"""The two evaluations a T5X run does while training, shared by `train` and `evaluate`.

training_eval: teacher-forced loss and accuracy on a task's eval split (cheap, every
eval_period). inference_eval: decode (or score) the eval split and compute the task's
metrics, e.g. BLEU, with predictions written as JSONL.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import jax
import numpy as np
from jax.experimental import multihost_utils

from t5forge import storage
from t5forge.data.feature_converters import converter_for
from t5forge.run import setup
from t5forge.run.dataset_and_checkpoint_configs import DatasetConfig
from t5forge.training.summaries import MetricsWriter


def _tasks(name: str) -> list:
    """The task objects of a task or mixture (a mixture's tasks need not be registered)."""
    from t5forge.data.providers.mixture import get_mixture_or_task

    return get_mixture_or_task(name).tasks


def training_eval(
    trainer,
    params,
    cfg: DatasetConfig,
    eval_steps: int,
    writer: MetricsWriter,
    step: int,
    converter,
) -> dict:
    """Mean loss and token accuracy over up to `eval_steps` batches of each task's eval split."""
    from t5forge.data.batch_iterator import make_batch_iterator

    results = {}
    for task in _tasks(cfg.mixture_or_task_name):
        task_name = task.name
        iterator = make_batch_iterator(
            task,
            cfg.split,
            dict(cfg.task_feature_lengths),
            cfg.batch_size // jax.process_count(),
            converter,
            seed=0,
            shard_index=jax.process_index(),
            num_shards=jax.process_count(),
            shuffle=False,
            num_epochs=1,
            use_cached=cfg.use_cached,
        )
        totals: dict[str, float] = {}
        batches = 0
        for batch in _while_every_process_has_one(iterator):
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


def _label_predict_fn(model, params, label_token_ids):
    def predict(batch):
        labels = model.predict_batch(
            params, batch, method="labels", label_token_ids=label_token_ids
        )
        return np.asarray(jax.device_get(labels))

    return predict


def _while_every_process_has_one(iterator):
    """The batches of a finite iterator, stopping when any process has run out of its shard.

    Shards may differ by a row, so one process can have a batch more than another; the eval
    step is one program over all processes, and a process calling it alone would wait forever.
    """
    for batch in iterator:
        if jax.process_count() > 1 and not multihost_utils.process_allgather(np.bool_(True)).all():
            return
        yield batch
    if jax.process_count() > 1:
        multihost_utils.process_allgather(np.bool_(False))


class InferenceEvaluation:
    """Runs the task's metrics on decoded predictions (and scores, for score metrics)."""

    def __init__(
        self,
        model,
        cfg: DatasetConfig,
        model_dir,
        writer: MetricsWriter,
        max_decode_length: int | None = None,
        output_dir=None,
        method: str = "greedy",
    ):
        from t5forge.data.evaluator import Evaluator

        self.model = model
        self.writer = writer
        self.method = method
        self.max_decode_length = max_decode_length or setup.default_max_decode_length(
            model, cfg.task_feature_lengths
        )
        output_dir = storage.path(output_dir or storage.path(model_dir) / "inference_eval")
        if jax.process_index() != 0:
            # Every process decodes (the parameters are sharded over all of them) but only
            # process 0 may write the JSONL files; the others write to a scratch directory.
            self._scratch = tempfile.TemporaryDirectory(prefix="t5forge-eval-")
            output_dir = Path(self._scratch.name)
        self.evaluator = Evaluator(
            cfg.mixture_or_task_name,
            cfg.task_feature_lengths or None,
            cfg.batch_size,
            output_dir,
            split=cfg.split,
            converter=converter_for(model, pack=False),
            use_cached=cfg.use_cached,
        )

    def predict_fn(self, params):
        def predict(batch):
            tokens = self.model.predict_batch(
                params, batch, method=self.method, max_decode_length=self.max_decode_length
            )
            return np.asarray(jax.device_get(tokens))

        return predict

    def label_predict_fns(self, params) -> dict:
        """{task: predict_fn} for tasks with single_token_labels: argmax over label tokens."""
        return {
            task.name: _label_predict_fn(self.model, params, task.label_token_ids())
            for task in self.evaluator.tasks
            if task.single_token_labels
        }

    def score_fn(self, params):
        return lambda batch: np.asarray(jax.device_get(self.model.score_batch(params, batch)))

    def run(self, step: int, params) -> dict:
        results = self.evaluator.evaluate(
            predict_fn=self.predict_fn(params),
            score_fn=self.score_fn(params),
            step=step,
            task_predict_fns=self.label_predict_fns(params),
        )
        flat = {}
        for task_name, metrics in results.items():
            self.writer.write_scalars(step, metrics, split=f"inference_eval/{task_name}")
            flat[f"inference_eval/{task_name}"] = metrics
        return flat
