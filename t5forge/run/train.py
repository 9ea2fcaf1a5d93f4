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

import inspect
import json
import logging
import os
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import jax
import numpy as np
from jax.experimental import multihost_utils

from t5forge import storage
from t5forge.errors import ConfigError, T5ForgeError
from t5forge.run import setup
from t5forge.run.configs import (
    CheckpointConfig,
    DatasetConfig,
    RestoreCheckpointConfig,
    SaveCheckpointConfig,
)
from t5forge.run.evaluation import InferenceEvaluation, converter_for, training_eval
from t5forge.run.hooks import Hook, RunContext
from t5forge.run.model_dir_lock import ModelDirLock
from t5forge.run.preemption import Preempted, StopSignal
from t5forge.run.storage_errors import StorageFailureEcho, storage_errno
from t5forge.training import checkpoints, flops, optimizers, schedules, summaries
from t5forge.training.partitioning import PjitPartitioner
from t5forge.training.remote_model_dir import RemoteModelDir
from t5forge.training.trainer import APPLIED, Trainer, metrics_to_host

logger = logging.getLogger("t5forge")


def _make_optimizer(optimizer, learning_rate_fn, param_axes):
    if isinstance(optimizer, str):
        return optimizers.create_optimizer(optimizer, learning_rate_fn, param_axes)
    accepts_axes = "param_logical_axes" in inspect.signature(optimizer).parameters
    if accepts_axes:
        return optimizer(learning_rate_fn, param_logical_axes=param_axes)
    return optimizer(learning_rate_fn)


def _schedule(learning_rate_fn):
    """A step -> rate function from a schedule, a constant, or None (T5X's default schedule)."""
    if learning_rate_fn is None:
        return schedules.create_learning_rate_scheduler()
    if isinstance(learning_rate_fn, int | float):
        return schedules.create_learning_rate_scheduler("constant", float(learning_rate_fn))
    return learning_rate_fn


def _step_flops(config, batch, process_count: int) -> float:
    """Model FLOPs of one training step over the global batch (its shapes are fixed)."""
    targets = batch["decoder_target_tokens"].shape
    inputs = batch["encoder_input_tokens"].shape[1] if "encoder_input_tokens" in batch else 0
    return flops.model_flops_per_step(config, targets[0] * process_count, inputs, targets[1])


def _batch_counts(batch) -> dict[str, float]:
    weights = np.asarray(batch.get("decoder_loss_weights", batch["decoder_target_tokens"] > 0))
    tokens = np.asarray(batch["decoder_target_tokens"])
    return {
        "target_tokens": float(weights.sum()),
        "all_tokens": float(tokens.size),
        "seqs": float(tokens.shape[0]),
    }


def train(
    *,
    model,
    train_dataset_cfg: DatasetConfig,
    total_steps: int,
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
    if total_steps < 0:
        raise ConfigError(f"TRAIN_STEPS must be >= 0, got {total_steps}")
    if max_skipped_nonfinite_steps < 0:
        raise ConfigError(
            f"max_skipped_nonfinite_steps must be >= 0, got {max_skipped_nonfinite_steps}"
        )
    is_chief = jax.process_index() == 0
    lock = ModelDirLock(model_dir, take_over=take_over_lock)
    remote = _remote_model_dir(model_dir)
    if not remote:
        Path(model_dir).mkdir(parents=True, exist_ok=True)
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
    tx = _make_optimizer(optimizer, learning_rate_fn, param_axes)
    trainer = trainer_cls(model, tx, partitioner, learning_rate_fn, num_microbatches, random_seed)

    ckpt = checkpoints.Checkpointer(
        model_dir,
        keep=checkpoint_cfg.keep,
        period=checkpoint_cfg.period,
        keep_best_metric=checkpoint_cfg.metric_name_to_monitor,
        best_mode=checkpoint_cfg.metric_mode,
        async_save=checkpoint_cfg.async_save,
    )
    ckpt.check_matches(model.abstract_params())

    process_count = jax.process_count()
    train_iter = _batch_iterator(model, train_dataset_cfg, random_seed, shuffle=True)
    abstract_state = trainer.abstract_state()
    trainer.state_shardings = trainer.shardings_for(abstract_state)
    restored = ckpt.restore_latest(abstract_state, trainer.state_shardings)
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

    def evaluate(step_now, params) -> dict:
        results = {}
        if train_eval_dataset_cfg is not None:
            results.update(
                training_eval(
                    trainer,
                    params,
                    train_eval_dataset_cfg,
                    eval_steps,
                    writer,
                    step_now,
                    converter_for(model, False),
                )
            )
        if inference is not None:
            results.update(inference.run(step_now, params))
        if is_chief:
            summaries.plot_training_curves(model_dir)
        flat = _flat(results)
        for hook in hooks:
            hook.on_eval(context, step_now, flat)
        return flat

    def save(at_step, metrics=None, force=False, position=None, of=None):
        """Saves `of` (default: the loop's state) as `at_step`, at the checkpoint period or
        when forced; `position` is the data position to record (default: the current one)."""
        if not force and at_step % checkpoint_cfg.period:
            return False  # skip gathering the data positions for a step that is not saved
        saved = ckpt.save(
            at_step,
            state if of is None else of,
            _data_positions(train_iter.get_state() if position is None else position),
            metadata=metadata,
            metrics=metrics,
            force=force,
        )
        if saved and remote:
            remote.saving(at_step)  # the earlier checkpoints are final now: copied up
        return saved

    step = int(jax.device_get(state.step))
    context = RunContext(
        model=model,
        trainer=trainer,
        model_dir=model_dir,
        writer=writer,
        get_state=lambda: state,
        save=lambda: save(step, force=True),
        evaluate=lambda: evaluate(step, state.params),
    )
    start_step = step
    stop = StopSignal()
    last_metrics: dict = {}
    eval_results: dict = {}
    evaluated_at = None
    for hook in hooks:
        hook.on_start(context)
    if run_eval_before_training or (step == 0 and eval_period and inference is not None):
        eval_results = evaluate(step, state.params)

    bar = _progress(step, total_steps, progress and is_chief)
    counts = {"target_tokens": 0.0, "all_tokens": 0.0, "seqs": 0.0}
    window_start, window_steps = time.perf_counter(), 0
    skipped: list[int] = []
    peak_flops, step_flops = flops.local_peak_flops(model.config.dtype), None

    def settle(state, done_step, applied, position):
        """Acts on whether step `done_step` was applied: a refused (non-finite) step stops the
        run with the last good state saved, or is skipped within the allowed budget."""
        if bool(jax.device_get(applied)):
            return state
        skipped.append(done_step)
        if len(skipped) > max_skipped_nonfinite_steps:
            # The steps dispatched after the refused one were refused too: `state` is the last
            # good one, and `position` the data position it had reached.
            state = state.replace(step=jax.device_put(done_step - 1, trainer.state_shardings.step))
            save(done_step - 1, force=True, position=position, of=state)  # no-op if on disk
            ckpt.wait_until_finished()
            raise T5ForgeError(_nonfinite_message(done_step, skipped, ckpt.step_dir(done_step - 1)))
        print(
            f"warning: step {done_step} gave non-finite values; its batch is skipped "
            f"({len(skipped)} of at most {max_skipped_nonfinite_steps})",
            file=sys.stderr,
        )
        return state.replace(step=jax.device_put(done_step, trainer.state_shardings.step))

    def state_needed(at_step) -> bool:
        """Whether anything after step `at_step` reads the state or metrics (so it must be
        settled now); otherwise the check waits a step and the device stays busy."""
        return bool(
            max_skipped_nonfinite_steps
            or at_step == total_steps
            or at_step % stats_period == 0
            or at_step % checkpoint_cfg.period == 0
            or (eval_period and at_step % eval_period == 0)
            or any(at_step % max(hook.every, 1) == 0 for hook in hooks)
        )

    pending = None  # (step, its `applied` flag on device, the data position before it)
    echo = StorageFailureEcho()
    echo.install()
    try:
        while step < total_steps:
            position = (
                train_iter.get_state()
            )  # the data position of `step`, in case it is last good
            batch = next(train_iter)
            if step_flops is None and peak_flops is not None:
                step_flops = _step_flops(model.config, batch, process_count)
            for key, value in _batch_counts(batch).items():
                counts[key] += value * process_count
            state, metrics = trainer.train_step(state, batch, expected_step=step)
            step += 1
            window_steps += 1
            if pending is not None:
                state = settle(state, *pending)
            pending = (step, metrics.pop(APPLIED), position)
            preempted = stop.after_step(step)
            if preempted or state_needed(step):
                state, pending = settle(state, *pending), None
            if step % stats_period == 0 or step == total_steps or preempted:
                host = metrics_to_host(metrics)
                if max_skipped_nonfinite_steps:
                    host["nonfinite_steps_skipped"] = float(len(skipped))
                elapsed = time.perf_counter() - window_start
                host.update(
                    {
                        "timing/steps_per_second": window_steps / elapsed,
                        "timing/seqs_per_second": counts["seqs"] / elapsed,
                        "timing/target_tokens_per_second": counts["target_tokens"] / elapsed,
                        "non_padding_fraction/loss_weights": counts["target_tokens"]
                        / max(counts["all_tokens"], 1),
                    }
                )
                if peak_flops is not None:  # accelerators only: no CPU has a known peak
                    host["timing/mfu"] = flops.mfu(
                        step_flops * window_steps, elapsed, peak_flops, jax.device_count()
                    )
                writer.write_scalars(step, host, split="train")
                last_metrics = host
                for hook in hooks:
                    hook.on_metrics(context, step, host)
                if bar is not None:
                    bar.set_postfix(
                        loss=f"{host['loss']:.4g}",
                        tok_s=f"{host['timing/target_tokens_per_second']:.0f}",
                    )
                counts = dict.fromkeys(counts, 0.0)
                window_start, window_steps = time.perf_counter(), 0
            if bar is not None:
                bar.update(1)
            for hook in hooks:
                if step % max(hook.every, 1) == 0:
                    hook.on_step(context, step)
            if eval_period and step % eval_period == 0 and step != start_step:
                eval_results, evaluated_at = evaluate(step, state.params), step
                save(step, metrics=eval_results)
            else:
                save(step)
            if preempted:
                print(
                    f"{_signal_name(stop.signum)}: saving step {step} and exiting", file=sys.stderr
                )
                break
            if context.stop_reason:
                print(f"{context.stop_reason}; saving step {step}", file=sys.stderr)
                break
        if not stop.received and eval_period and step % eval_period and step != start_step:
            eval_results, evaluated_at = evaluate(step, state.params), step
        if ckpt.latest_step() != step:
            # Eval metrics belong to the checkpoint only if they were computed at this step.
            save(step, metrics=(eval_results if evaluated_at == step else None) or None, force=True)
        for hook in hooks:
            hook.on_end(context, step)
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
        if bar is not None:
            bar.close()
        lock.release()
        echo.remove()
    if stop.received and step < total_steps:
        raise Preempted(stop.signum, step, ckpt.step_dir(step))
    return {**last_metrics, **eval_results}


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


def _signal_name(signum: int | None) -> str:
    import signal

    return signal.Signals(signum).name if signum else "SIGTERM"


def _nonfinite_message(step: int, skipped: list[int], last_good: Path) -> str:
    allowed = len(skipped) - 1
    return (
        f"step {step} gave a non-finite loss, parameter or optimizer value"
        + (f" (after {allowed} skipped: steps {skipped[:-1]})" if allowed else "")
        + f"; it was not applied, and the last good state (step {step - 1}) is in "
        f"{last_good}. Lower the learning rate or use float32 activations, then rerun the "
        "same command to resume from it (or allow skipping a few bad batches with "
        "--gin.train.max_skipped_nonfinite_steps=N)"
    )


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


def _data_positions(local_state: dict) -> dict:
    """Every process's iterator state, for the checkpoint (each process reads its own shard).

    Orbax writes JSON items from process 0 only, so the states are all-gathered first (as
    padded UTF-8 bytes: collectives need equal shapes on every process).
    """
    local = json.dumps(local_state).encode()
    if jax.process_count() == 1:
        encoded = [local]
    else:
        lengths = multihost_utils.process_allgather(np.int32(len(local)))
        padded = np.zeros(int(lengths.max()), np.uint8)
        padded[: len(local)] = np.frombuffer(local, np.uint8)
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
        print(
            f"{restored.path} was written by {saved_count} process(es) and this run has "
            f"{jax.process_count()}; the data is sharded differently, so each process reads "
            "its new shard from the start",
            file=sys.stderr,
        )


def _batch_iterator(model, cfg: DatasetConfig, random_seed: int, shuffle: bool):
    from t5forge.data.pipeline import make_batch_iterator

    return make_batch_iterator(
        cfg.mixture_or_task_name,
        cfg.split,
        dict(cfg.task_feature_lengths),
        cfg.batch_size // jax.process_count(),
        converter_for(model, cfg.pack),
        seed=random_seed if cfg.seed is None else cfg.seed,
        shard_index=jax.process_index(),
        num_shards=jax.process_count(),
        shuffle=shuffle and cfg.shuffle,
        num_epochs=None,
        use_cached=cfg.use_cached,
    )


def _progress(step: int, total: int, enabled: bool):
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(total=total, initial=step, unit="step", dynamic_ncols=True, desc="train")
