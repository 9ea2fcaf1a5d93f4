"""The training loop (T5X's `train`), a library function the CLI and Python callers share.

    import t5forge
    from t5forge.run import DatasetConfig
    t5forge.train(model="t5_1_1/small", model_dir="/tmp/run", total_steps=1000,
                  train_dataset_cfg=DatasetConfig("en_de_lohelp_translate",
                                                  {"inputs": 64, "targets": 64}, "train", 32))

A run restores the latest checkpoint of MODEL_DIR (parameters, optimizer state and the data
iterator's position), so rerunning the same command after a preemption continues exactly
where the last checkpoint left off; raising TRAIN_STEPS extends a finished run. One run at a
time may write a MODEL_DIR (t5forge.run.model_dir_lock); SIGTERM or Ctrl-C saves and raises
`Preempted`; a non-finite step stops the run with its last finite state saved.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import jax
import numpy as np

from t5forge import storage
from t5forge.checkpoints import checkpointer
from t5forge.checkpoints.remote_model_dir import RemoteModelDir
from t5forge.errors import ConfigError, T5ForgeError
from t5forge.run import setup
from t5forge.run.checkpointing import Checkpointing
from t5forge.run.dataset_and_checkpoint_configs import (
    CheckpointConfig,
    DatasetConfig,
    RestoreCheckpointConfig,
    SaveCheckpointConfig,
)
from t5forge.run.hooks import Hook, RunContext
from t5forge.run.loop import run_steps
from t5forge.run.model_dir_lock import ModelDirLock
from t5forge.run.nonfinite import NonFiniteSteps
from t5forge.run.periodic_eval import PeriodicEvaluation
from t5forge.run.preemption import Preempted, Preemption, StopSignal
from t5forge.run.progress import ProgressBar
from t5forge.run.storage_errors import StorageFailureEcho, storage_errno
from t5forge.run.train_metrics import TrainMetrics
from t5forge.run.training_and_inference_eval import InferenceEvaluation
from t5forge.training import optimizers, schedules, summaries
from t5forge.training.partitioning import PjitPartitioner
from t5forge.training.trainer import Trainer

logger = logging.getLogger("t5forge")


def _schedule(learning_rate_fn):
    """A step -> rate function from a schedule, a constant, or None (T5X's default schedule)."""
    if learning_rate_fn is None:
        return schedules.create_learning_rate_scheduler()
    if isinstance(learning_rate_fn, int | float):
        return schedules.create_learning_rate_scheduler("constant", float(learning_rate_fn))
    return learning_rate_fn


def train(
    *,
    model,
    train_dataset_cfg: DatasetConfig,
    total_steps: int | None,
    model_dir: str,
    train_eval_dataset_cfg: DatasetConfig | None = None,
    infer_eval_dataset_cfg: DatasetConfig | None = None,
    checkpoint_cfg: SaveCheckpointConfig | CheckpointConfig = SaveCheckpointConfig(),
    restore_checkpoint_cfg: RestoreCheckpointConfig | None = None,
    partitioner: PjitPartitioner | None = None,
    trainer_cls: type[Trainer] = Trainer,
    optimizer=optimizers.adafactor,
    learning_rate_fn=None,
    eval_period: int = 1000,
    eval_steps: int = 20,
    stats_period: int | None = None,
    random_seed: int = 0,
    num_microbatches: int = 1,
    infer_max_decode_length: int | None = None,
    run_eval_before_training: bool = False,
    hooks: Sequence[Hook] = (),
    summarize_config_fn: Callable[[Path], None] | None = None,
    progress: bool = True,
    max_skipped_nonfinite_steps: int = 0,
    take_over_lock: bool = False,
    relative_steps: int | None = None,
) -> dict:
    """Trains `model` to `total_steps`, resuming MODEL_DIR's latest checkpoint if there is one.

    `model` is a t5forge model, a T5Config or a preset name ('t5_1_1/small'). `checkpoint_cfg`
    may be T5X's CheckpointConfig(save=..., restore=...); `restore_checkpoint_cfg` names the
    checkpoint a fresh run starts from (t5forge, T5X or Hugging Face). `optimizer` is a
    factory taking the learning-rate schedule (`optimizers.adafactor`, `optimizers.adamw`) or
    a name ('adafactor', 'adamw', ...);
    `learning_rate_fn` is a step -> rate function, a constant, or None for T5X's default
    (`constant * linear_warmup * rsqrt_decay`, base 0.5, 1000 warm-up steps).
    `hooks` are called during the loop (see t5forge.run.hooks); `summarize_config_fn(model_dir)`
    records the configuration (the CLI writes config.gin). Returns the last logged train
    metrics and the last evaluation's results.

    A step whose loss, parameters or optimizer state come out non-finite is not applied; the
    run stops there, naming it, with the last finite state saved (T5X's TerminateOnNanAction),
    unless `max_skipped_nonfinite_steps` allows dropping that many batches first. A second run
    into MODEL_DIR is refused while this one holds its lock (`take_over_lock` overrides).
    `relative_steps` (T5X's) trains that many steps past the step the run starts at, in place
    of `total_steps`.
    Raises `Preempted` after saving when SIGTERM or SIGINT arrives.
    """
    model = setup.resolve_model(model)
    setup.register_tasks(train_dataset_cfg, train_eval_dataset_cfg, infer_eval_dataset_cfg)
    if isinstance(checkpoint_cfg, CheckpointConfig):
        restore_checkpoint_cfg = restore_checkpoint_cfg or checkpoint_cfg.restore
        checkpoint_cfg = checkpoint_cfg.save or SaveCheckpointConfig()
    if not train_dataset_cfg.task_feature_lengths:
        raise ConfigError(
            "set TASK_FEATURE_LENGTHS, e.g. --gin.TASK_FEATURE_LENGTHS=\"{'inputs': 512, 'targets': 114}\""
        )
    if relative_steps is not None and relative_steps < 0:
        raise ConfigError(f"TRAIN_STEPS_RELATIVE must be >= 0, got {relative_steps}")
    if not relative_steps and (total_steps is None or total_steps < 0):
        raise ConfigError(f"TRAIN_STEPS must be >= 0, got {total_steps}")
    if max_skipped_nonfinite_steps < 0:
        raise ConfigError(
            f"max_skipped_nonfinite_steps must be >= 0, got {max_skipped_nonfinite_steps}"
        )
    is_chief = jax.process_index() == 0
    lock = ModelDirLock(model_dir, take_over=take_over_lock)
    remote = _remote_model_dir(model_dir)
    if not remote:
        storage.make_directory(model_dir, "MODEL_DIR")
        storage.require_kind(
            Path(model_dir) / summaries.METRICS_FILE, "file", "MODEL_DIR's metrics file"
        )
    if is_chief:
        lock.acquire()  # released at the end, or at exit if set-up fails
    if remote:
        remote.pull()
    model_dir = remote.local if remote else Path(model_dir)
    if is_chief and summarize_config_fn is not None:
        summarize_config_fn(model_dir)
    stats_period = stats_period or eval_period or 100

    partitioner = partitioner or PjitPartitioner()
    partitioner.check_batch_divisible(train_dataset_cfg.batch_size)
    param_axes = model.param_logical_axes()
    learning_rate_fn = _schedule(learning_rate_fn)
    tx = setup.make_optimizer(optimizer, learning_rate_fn, param_axes)
    trainer = trainer_cls(model, tx, partitioner, learning_rate_fn, num_microbatches, random_seed)

    ckpt = checkpointer.Checkpointer(
        model_dir,
        keep=checkpoint_cfg.keep,
        period=checkpoint_cfg.period,
        keep_best_metric=checkpoint_cfg.metric_name_to_monitor,
        best_mode=checkpoint_cfg.metric_mode,
        async_save=checkpoint_cfg.async_save,
    )
    ckpt.check_matches(model.abstract_params())

    train_iter = setup.training_batches(model, train_dataset_cfg, random_seed, shuffle=True)
    abstract_state = trainer.abstract_state()
    trainer.state_shardings = trainer.shardings_for(abstract_state)
    reads = StorageFailureEcho(hold_all=True)  # a damaged checkpoint: one warning, no echoes
    reads.install()
    try:
        restored = ckpt.restore_latest(abstract_state, trainer.state_shardings)
    finally:
        if ckpt.damaged:
            reads.expect_failures()
        reads.remove()
    metadata = setup.model_metadata(model, train_dataset_cfg, model_dir)
    if restored is not None:
        setup.check_resume(restored.metadata, metadata, restored.path)
        state = restored.state
        _restore_data_position(train_iter, restored)
        logger.info("resumed from %s at step %d", restored.path, restored.step)
        print(f"resumed from {restored.path} (step {restored.step})", file=sys.stderr)
    else:
        fresh = trainer.init_state()
        params, message = setup.restore_config_params(restore_checkpoint_cfg, model, fresh.params)
        if params is not None:
            state = trainer.state_from_params(params)
            print(message, file=sys.stderr)
        else:
            state = fresh

    if relative_steps:  # T5X: counted from the step restored (0 for a fresh run)
        total_steps = int(state.step) + relative_steps
    if is_chief:
        summaries.write_model_info(
            model_dir / "model-info.txt",
            abstract_state.params,
            param_axes,
            jax.tree.map(lambda s: str(s.spec), trainer.state_shardings.params),
            abstract_state.opt_state,
        )
    if is_chief:
        _warn_if_low_on_space(model_dir, abstract_state, ckpt)
    writer = summaries.MetricsWriter(model_dir, enabled=is_chief)
    writer.forget_after(restored.step if restored is not None else -1)
    inference = (
        InferenceEvaluation(
            model, infer_eval_dataset_cfg, model_dir, writer, infer_max_decode_length
        )
        if infer_eval_dataset_cfg
        else None
    )

    stop = StopSignal()
    evaluation = PeriodicEvaluation(
        eval_period,
        train_eval_dataset_cfg,
        eval_steps,
        inference,
        run_eval_before_training,
        is_chief,
        interrupted=lambda: stop.received,
    )
    checkpointing = Checkpointing(
        ckpt, checkpoint_cfg.period, train_iter, metadata, remote, evaluation.results_at
    )
    nonfinite = NonFiniteSteps(max_skipped_nonfinite_steps, checkpointing)
    bar = ProgressBar(enabled=progress and is_chief)
    metrics = TrainMetrics(stats_period, extra=nonfinite.scalars)
    run = RunContext(
        model=model,
        trainer=trainer,
        model_dir=model_dir,
        writer=writer,
        state=state,
        total_steps=total_steps,
        # In call order: the user's hooks act on a step before it is evaluated and saved.
        hooks=[*hooks, evaluation, checkpointing, Preemption(stop), nonfinite, bar, metrics],
        save=lambda run: checkpointing.save(run, run.step, force=True),
        evaluate=evaluation.evaluate,
    )
    echo = StorageFailureEcho()
    echo.install()
    try:
        run_steps(run, train_iter)
        ckpt.wait_until_finished()
        if remote:
            writer.close()  # the last TensorBoard events on disk before they are copied
            remote.finish()
    except (OSError, ValueError) as error:
        if storage_errno(error) is None:
            raise
        raise T5ForgeError(_storage_message(error, model_dir, ckpt)) from None
    finally:
        stop.restore()
        _close_quietly(ckpt)
        if remote:
            remote.abandon()
        writer.close()
        bar.close()
        lock.release()
        echo.remove()
    if stop.received and run.step < total_steps:
        raise Preempted(stop.signum, run.step, ckpt.step_dir(run.step))
    return {**metrics.last, **evaluation.results}


def _remote_model_dir(model_dir) -> RemoteModelDir | None:
    """The local mirror of a MODEL_DIR on object storage; None for a local one."""
    if not storage.is_url(model_dir):
        return None
    if jax.process_count() > 1:
        raise ConfigError(
            f"MODEL_DIR {model_dir} is on object storage, which a multi-host run cannot mirror "
            "yet (every host writes its shards); use a file system all hosts share"
        )
    return RemoteModelDir(os.fspath(model_dir))


def _storage_message(error: Exception, model_dir: Path, ckpt) -> str:
    """Disk full or read-only, as one line: what failed, what survives, what to do."""
    finished = [step for step in ckpt.all_steps() if ckpt.step_dir(step).is_dir()]
    latest = finished[-1] if finished else None  # orbax lists a failed save's step too
    kept = (
        f"the last good checkpoint is {ckpt.step_dir(latest)}"
        if latest is not None
        else "no checkpoint was saved yet"
    )
    what = (
        f"{error.filename or model_dir}: {error.strerror}"
        if isinstance(error, OSError)
        else f"checkpoint files in {model_dir}: {os.strerror(storage_errno(error))}"
    )
    return (
        f"cannot write {what}; {kept}. "
        f"Free space in (or make writable) {model_dir}, then rerun the same command to "
        "resume"
    )


def _close_quietly(ckpt) -> None:
    """Closes the checkpointer; a save that failed for lack of space was reported already."""
    try:
        ckpt.wait_until_finished()
        ckpt.close()
    except (OSError, ValueError) as error:
        if storage_errno(error) is None:
            raise
        logger.info("the last checkpoint save failed: %s", str(error)[:300])


def _directory_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _warn_if_low_on_space(model_dir: Path, abstract_state, ckpt) -> None:
    """Warns at start-up when MODEL_DIR's disk has room for fewer than two more checkpoints."""
    latest = ckpt.latest_step()
    if latest is not None:
        size = _directory_bytes(ckpt.step_dir(latest))
    else:
        size = sum(
            int(np.prod(x.shape)) * x.dtype.itemsize for x in jax.tree.leaves(abstract_state)
        )
    free = shutil.disk_usage(model_dir).free
    if free < 2 * size:
        logger.warning(
            "warning: %s has %.1f MB free, less than two checkpoints (%.1f MB each); "
            "the run stops when the disk is full",
            model_dir,
            free / 1e6,
            size / 1e6,
        )


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
        print(
            f"{restored.path} was written by {saved_count} process(es) and this run has "
            f"{jax.process_count()}; the data is sharded differently, so each process reads "
            "its new shard from the start",
            file=sys.stderr,
        )
