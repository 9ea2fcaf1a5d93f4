"""`t5forge train`: the T5X training loop, configured with gin.

    t5forge train --gin_file=runs/finetune.gin --gin_file=models/t5_1_1/small.gin \\
        --gin.MODEL_DIR=/tmp/run --gin.MIXTURE_OR_TASK_NAME=en_de_lohelp_translate

A run restores the latest checkpoint of MODEL_DIR (parameters, optimizer state and the data
iterator's position), so rerunning the same command after a preemption continues exactly
where the last checkpoint left off; raising TRAIN_STEPS extends a finished run.
"""

from __future__ import annotations

import inspect
import json
import logging
import signal
import sys
import time
from pathlib import Path

import gin
import jax
import numpy as np
from jax.experimental import multihost_utils

from t5forge.cli import run_setup
from t5forge.cli.run_config import (
    DatasetConfig,
    PjitPartitioner,
    RestoreCheckpointConfig,
    SaveCheckpointConfig,
)
from t5forge.cli.run_eval import InferenceEvaluation, converter_for, training_eval
from t5forge.cli.task_modules import import_task_modules
from t5forge.errors import ConfigError, T5ForgeError
from t5forge.training import checkpoints, optimizers, partitioning, schedules, summaries  # noqa: F401 (gin)
from t5forge.training.trainer import Trainer, metrics_to_host

HELP = "train a model (T5X flags: --gin_file, --gin.NAME=VALUE)"
logger = logging.getLogger("t5forge")

gin.external_configurable(optimizers.adafactor, name="Adafactor", module="adafactor")
gin.external_configurable(optimizers.adamw, name="adamw", module="optimizers")


class _StopSignal:
    """Turns SIGTERM (preemption) into a stop after the current step.

    With several processes, each must stop (and save) at the same step, or the collectives of
    the next step hang; JAX's preemption service (it installs its own SIGTERM handler at
    `jax.distributed.initialize`) propagates one host's notice and names that common step.
    """

    def __init__(self):
        self.received = False
        self._distributed = jax.process_count() > 1
        if not self._distributed:
            signal.signal(signal.SIGTERM, self._handle)

    def _handle(self, signum, frame):
        self.received = True

    def after_step(self, step: int) -> bool:
        """Whether to save `step` and stop; every process must call it after every step."""
        if self._distributed and multihost_utils.reached_preemption_sync_point(step):
            self.received = True
        return self.received


def _make_optimizer(optimizer, learning_rate_fn, param_axes):
    accepts_axes = "param_logical_axes" in inspect.signature(optimizer).parameters
    if accepts_axes:
        return optimizer(learning_rate_fn, param_logical_axes=param_axes)
    return optimizer(learning_rate_fn)


def _batch_counts(batch) -> dict[str, float]:
    weights = np.asarray(batch.get("decoder_loss_weights", batch["decoder_target_tokens"] > 0))
    tokens = np.asarray(batch["decoder_target_tokens"])
    return {"target_tokens": float(weights.sum()), "all_tokens": float(tokens.size),
            "seqs": float(tokens.shape[0])}


@gin.configurable
def train(
    *,
    model,
    train_dataset_cfg: DatasetConfig,
    total_steps: int,
    model_dir: str,
    train_eval_dataset_cfg: DatasetConfig | None = None,
    infer_eval_dataset_cfg: DatasetConfig | None = None,
    checkpoint_cfg: SaveCheckpointConfig = SaveCheckpointConfig(),
    restore_checkpoint_cfg: RestoreCheckpointConfig | None = None,
    partitioner: PjitPartitioner = PjitPartitioner(),
    optimizer=optimizers.adafactor,
    learning_rate_fn=None,
    eval_period: int = 1000,
    eval_steps: int = 20,
    stats_period: int | None = None,
    random_seed: int = 0,
    num_microbatches: int = 1,
    infer_max_decode_length: int | None = None,
    run_eval_before_training: bool = False,
    progress: bool = True,
) -> dict:
    """Trains `model` to `total_steps`, resuming MODEL_DIR's latest checkpoint if there is one.

    Returns the last logged train metrics (and eval metrics when evaluation ran).
    """
    if not train_dataset_cfg.task_feature_lengths:
        raise ConfigError("set TASK_FEATURE_LENGTHS, e.g. --gin.TASK_FEATURE_LENGTHS=\"{'inputs': 512, 'targets': 114}\"")
    if total_steps < 0:
        raise ConfigError(f"TRAIN_STEPS must be >= 0, got {total_steps}")
    model_dir = Path(model_dir)
    model_dir.mkdir(parents=True, exist_ok=True)
    is_chief = jax.process_index() == 0
    if is_chief:
        (model_dir / "config.gin").write_text(gin.config_str())
    stats_period = stats_period or eval_period or 100

    mesh, rules = run_setup.make_mesh(partitioner)
    partitioning.check_batch_divisible(train_dataset_cfg.batch_size, mesh)
    param_axes = model.param_logical_axes()
    tx = _make_optimizer(optimizer, learning_rate_fn, param_axes)
    trainer = Trainer(model, tx, mesh, rules, learning_rate_fn, num_microbatches, random_seed)

    ckpt = checkpoints.Checkpointer(
        model_dir, keep=checkpoint_cfg.keep, period=checkpoint_cfg.period,
        keep_best_metric=checkpoint_cfg.metric_name_to_monitor,
        best_mode=checkpoint_cfg.metric_mode, async_save=checkpoint_cfg.async_save,
    )
    ckpt.check_matches(model.abstract_params())

    process_count = jax.process_count()
    train_iter = _batch_iterator(model, train_dataset_cfg, random_seed, shuffle=True)
    abstract_state = trainer.abstract_state()
    trainer.state_shardings = trainer.shardings_for(abstract_state)
    restored = ckpt.restore_latest(abstract_state, trainer.state_shardings)
    if restored is not None:
        state = restored.state
        _restore_data_position(train_iter, restored)
        logger.info("resumed from %s at step %d", restored.path, restored.step)
        print(f"resumed from {restored.path} (step {restored.step})", file=sys.stderr)
    else:
        fresh = trainer.init_state()
        params, message = run_setup.restore_config_params(restore_checkpoint_cfg, model, fresh.params)
        if params is not None:
            state = trainer.state_from_params(params)
            print(message, file=sys.stderr)
        else:
            state = fresh

    if is_chief:
        summaries.write_model_info(
            model_dir / "model-info.txt", abstract_state.params, param_axes,
            jax.tree.map(lambda s: str(s.spec), trainer.state_shardings.params),
            abstract_state.opt_state,
        )
    writer = summaries.MetricsWriter(model_dir, enabled=is_chief)
    inference = (InferenceEvaluation(model, infer_eval_dataset_cfg, model_dir, writer,
                                     infer_max_decode_length)
                 if infer_eval_dataset_cfg else None)

    def evaluate(step_now, params) -> dict:
        results = {}
        if train_eval_dataset_cfg is not None:
            results.update(training_eval(trainer, params, train_eval_dataset_cfg, eval_steps,
                                         writer, step_now, converter_for(model, False)))
        if inference is not None:
            results.update(inference.run(step_now, params))
        if is_chief:
            summaries.plot_training_curves(model_dir)
        return results

    metadata = run_setup.model_metadata(model, train_dataset_cfg.mixture_or_task_name, model_dir)

    def save(at_step, metrics=None, force=False):
        if not force and at_step % checkpoint_cfg.period:
            return False  # skip gathering the data positions for a step that is not saved
        return ckpt.save(at_step, state, _data_positions(train_iter), metadata=metadata,
                         metrics=metrics, force=force)

    step = int(jax.device_get(state.step))
    start_step = step
    stop = _StopSignal()
    last_metrics: dict = {}
    eval_results: dict = {}
    evaluated_at = None
    if run_eval_before_training or (step == 0 and eval_period and inference is not None):
        eval_results = evaluate(step, state.params)

    bar = _progress(step, total_steps, progress and is_chief)
    counts = {"target_tokens": 0.0, "all_tokens": 0.0, "seqs": 0.0}
    window_start, window_steps = time.perf_counter(), 0
    try:
        while step < total_steps:
            batch = next(train_iter)
            for key, value in _batch_counts(batch).items():
                counts[key] += value * process_count
            state, metrics = trainer.train_step(state, batch)
            step += 1
            window_steps += 1
            stopping = stop.after_step(step)
            if step % stats_period == 0 or step == total_steps or stopping:
                host = metrics_to_host(metrics)
                good = int(jax.device_get(state.step))
                if good != step or not np.isfinite(host["loss"]):
                    save(good, force=True)
                    ckpt.wait_until_finished()
                    raise T5ForgeError(
                        f"loss became non-finite ({step - good} of the steps up to {step} were "
                        f"skipped); the last good state (step {good}) is saved in "
                        f"{ckpt.step_dir(good)}. Lower the learning rate or use float32 "
                        "activations, then rerun to resume from it")
                elapsed = time.perf_counter() - window_start
                host.update({
                    "timing/steps_per_second": window_steps / elapsed,
                    "timing/seqs_per_second": counts["seqs"] / elapsed,
                    "timing/target_tokens_per_second": counts["target_tokens"] / elapsed,
                    "non_padding_fraction/loss_weights": counts["target_tokens"] / max(counts["all_tokens"], 1),
                })
                writer.write_scalars(step, host, split="train")
                last_metrics = host
                if bar is not None:
                    bar.set_postfix(loss=f"{host['loss']:.4g}",
                                    tok_s=f"{host['timing/target_tokens_per_second']:.0f}")
                counts = dict.fromkeys(counts, 0.0)
                window_start, window_steps = time.perf_counter(), 0
            if bar is not None:
                bar.update(1)
            if eval_period and step % eval_period == 0 and step != start_step:
                eval_results, evaluated_at = evaluate(step, state.params), step
                save(step, metrics=_flat(eval_results))
            else:
                save(step)
            if stopping:
                print(f"SIGTERM: saving step {step} and exiting", file=sys.stderr)
                break
        if not stop.received and eval_period and step % eval_period and step != start_step:
            eval_results, evaluated_at = evaluate(step, state.params), step
        if ckpt.latest_step() != step:
            # Eval metrics belong to the checkpoint only if they were computed at this step.
            metrics = _flat(eval_results) if evaluated_at == step else None
            save(step, metrics=metrics or None, force=True)
    finally:
        ckpt.wait_until_finished()
        ckpt.close()
        writer.close()
        if bar is not None:
            bar.close()
    return {**last_metrics, **_flat(eval_results)}


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


def _data_positions(train_iter) -> dict:
    """Every process's iterator state, for the checkpoint (each process reads its own shard).

    Orbax writes JSON items from process 0 only, so the states are all-gathered first (as
    padded UTF-8 bytes: collectives need equal shapes on every process).
    """
    local = json.dumps(train_iter.get_state()).encode()
    if jax.process_count() == 1:
        encoded = [local]
    else:
        lengths = multihost_utils.process_allgather(np.int32(len(local)))
        padded = np.zeros(int(lengths.max()), np.uint8)
        padded[:len(local)] = np.frombuffer(local, np.uint8)
        rows = multihost_utils.process_allgather(padded)
        encoded = [row[:length].tobytes() for row, length in zip(rows, lengths)]
    return {"process_count": len(encoded), "process_states": [json.loads(e) for e in encoded]}


def _restore_data_position(train_iter, restored) -> None:
    """Continues this process's shard where the checkpoint left it, if the shards still match.

    With a different process count the data is split differently, so no saved position
    applies: the parameters and optimizer state are restored and the new shards start over.
    """
    positions = restored.dataset_state or {}
    saved_count = positions.get("process_count")
    if saved_count == jax.process_count():
        train_iter.set_state(positions["process_states"][jax.process_index()])
    elif saved_count is not None and jax.process_index() == 0:
        print(f"{restored.path} was written by {saved_count} process(es) and this run has "
              f"{jax.process_count()}; the data is sharded differently, so each process reads "
              "its new shard from the start", file=sys.stderr)


def _batch_iterator(model, cfg: DatasetConfig, random_seed: int, shuffle: bool):
    from t5forge.data.pipeline import make_batch_iterator

    if cfg.module:
        import_task_modules([cfg.module])
    return make_batch_iterator(
        cfg.mixture_or_task_name, cfg.split, dict(cfg.task_feature_lengths),
        cfg.batch_size // jax.process_count(), converter_for(model, cfg.pack),
        seed=random_seed if cfg.seed is None else cfg.seed,
        shard_index=jax.process_index(), num_shards=jax.process_count(),
        shuffle=shuffle and cfg.shuffle, num_epochs=None, use_cached=cfg.use_cached,
    )


def _progress(step: int, total: int, enabled: bool):
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(total=total, initial=step, unit="step", dynamic_ncols=True, desc="train")


def main(argv: list[str]) -> int:
    if not run_setup.configure_run(argv, HELP, "train"):
        return 0
    try:
        train()
    except TypeError as e:
        if "missing" in str(e) and "required" in str(e):
            missing = str(e).splitlines()[0].split(":", 1)[-1].strip()
            raise ConfigError(f"incomplete gin config for train, missing {missing}; include "
                              "runs/pretrain.gin or runs/finetune.gin (--gin_file=...)") from None
        raise
    return 0

