"""Inference (T5X's `infer`): predictions (or scores) for a task's split, written as T5X does.

`t5forge infer` is the command-line face of `infer`. Writes (locally or to a bucket) `<task>-<mode>.jsonl` with `inputs`, `prediction` (or `score`) and `targets`, in the
split's order. Output is flushed every `checkpoint_period` batches with a progress marker,
so an interrupted run continues after the last finished chunk instead of starting over. The
marker records the output's length too: rows a killed run appended after it are cut off on
resume, so every row is written exactly once. It also records what wrote the rows (checkpoint,
task, split, lengths, batch size, settings, data files): a rerun that differs is refused rather
than appending its rows to another run's. One `infer` at a time writes a directory (a lease file,
as `train`'s on its MODEL_DIR).
"""

from __future__ import annotations

import json
import os
import sys

import jax
import numpy as np

from t5forge import storage
from t5forge.data.feature_converters import converter_for
from t5forge.errors import ConfigError
from t5forge.run import output_identity, setup
from t5forge.run.dataset_and_checkpoint_configs import DatasetConfig, RestoreCheckpointConfig
from t5forge.run.model_dir_lock import ModelDirLock

MODES = ("predict", "score")
LOCK_FILE = "infer.lock"


def _text(vocabulary, tokens) -> str:
    return vocabulary.decode([int(t) for t in tokens if t > 0])


def _run_task(
    model,
    params,
    task,
    cfg: DatasetConfig,
    mode: str,
    output: os.PathLike,
    checkpoint_period: int,
    max_decode_length: int,
    checkpoint: str,
) -> int:
    from t5forge.data.batch_iterator import make_batch_iterator

    out_file = output / f"{task.name}-{mode}.jsonl"
    progress_file = output / f".{task.name}-{mode}.progress.json"
    identity = {
        "checkpoint": output_identity.checkpoint_identity(checkpoint),
        "task": task.name,
        "split": cfg.split,
        "task_feature_lengths": dict(cfg.task_feature_lengths),
        "batch_size": int(cfg.batch_size),
        "mode": mode,
        "max_decode_length": int(max_decode_length),
        "use_cached": bool(cfg.use_cached),
        "data": output_identity.data_fingerprint([task], cfg.split, cfg.use_cached),
    }
    progress = _read_progress(progress_file)
    output_identity.refuse_mismatch(
        progress.get("identity", identity),
        identity,
        f"the unfinished {out_file}",
        f"rerun with its settings to finish it, or give another INFER_OUTPUT_DIR (or delete "
        f"{progress_file.name} there to start over)",
    )
    done, size = progress["batches"], progress["bytes"]
    storage.require_kind(out_file, "file", "the output")
    if not done and out_file.exists():
        out_file.unlink()
    elif done and len(data := out_file.read_bytes()) > size:
        storage.write_atomically(out_file, data[:size])
    vocabulary = task.output_features["targets"].vocabulary
    iterator = make_batch_iterator(
        task.name,
        cfg.split,
        dict(cfg.task_feature_lengths),
        cfg.batch_size,
        converter_for(model, pack=False),
        seed=0,
        shuffle=False,
        num_epochs=1,
        use_cached=cfg.use_cached,
    )
    # A task with single_token_labels is predicted by its best label token, not decoded.
    label_ids = task.label_token_ids() if mode == "predict" else ()
    options = (
        {"method": "labels", "label_token_ids": label_ids}
        if label_ids
        else {"max_decode_length": max_decode_length}
    )
    pending: list[str] = []
    batches = 0
    written = 0
    for batch in iterator:
        batches += 1
        if batches <= done:
            continue
        rows = np.asarray(batch["decoder_target_tokens"]).any(axis=1)
        if mode == "predict":
            outputs = np.asarray(jax.device_get(model.predict_batch(params, batch, **options)))
        else:
            outputs = np.asarray(jax.device_get(model.score_batch(params, batch)))
        inputs = batch.get("encoder_input_tokens", batch["decoder_input_tokens"])
        for i in np.flatnonzero(rows):
            record = {"inputs": _text(vocabulary, inputs[i])}
            if mode == "predict":
                record["prediction"] = task.postprocess(_text(vocabulary, outputs[i]))
            else:
                record["score"] = float(outputs[i])
            record["targets"] = _text(vocabulary, batch["decoder_target_tokens"][i])
            pending.append(json.dumps(record, ensure_ascii=False))
        if batches % checkpoint_period == 0:
            size = _flush(out_file, progress_file, pending, batches, size, identity)
            written, pending = written + len(pending), []
    iterator.close()
    _flush(out_file, progress_file, pending, batches, size, identity)
    written += len(pending)
    progress_file.unlink()
    return written


def _read_progress(progress_file: os.PathLike) -> dict:
    """The marker of an unfinished run, or no batches done; an unreadable one is refused."""
    if not progress_file.exists():
        return {"batches": 0, "bytes": 0}
    try:
        progress = json.loads(progress_file.read_text())
        int(progress["batches"]), int(progress["bytes"])
    except (ValueError, KeyError, TypeError) as error:
        raise ConfigError(
            f"{progress_file} is unreadable ({type(error).__name__}); delete it to start the "
            "output over, or give another INFER_OUTPUT_DIR"
        ) from None
    return progress


def _flush(
    out_file: os.PathLike,
    progress_file: os.PathLike,
    lines: list[str],
    batches: int,
    size: int,
    identity: dict,
) -> int:
    """Appends a chunk (flushed to disk), then replaces the marker (batches done, the output's
    length, what wrote it) in one rename, so a kill at any moment leaves a whole marker;
    returns the output's new length."""
    text = "".join(line + "\n" for line in lines)
    with out_file.open("a", encoding="utf-8") as f:
        f.write(text)
        if not storage.is_url(out_file):
            f.flush()
            os.fsync(f.fileno())
    size += len(text.encode())
    progress = {"batches": batches, "bytes": size, "identity": identity}
    storage.write_atomically(progress_file, json.dumps(progress))
    return size


def infer(
    *,
    model,
    dataset_cfg: DatasetConfig,
    restore_checkpoint_cfg: RestoreCheckpointConfig,
    output_dir: str,
    mode: str = "predict",
    checkpoint_period: int = 100,
    max_decode_length: int | None = None,
) -> dict[str, int]:
    """Writes one JSONL file per task into `output_dir`; returns {task: rows written}.

    `model` is a t5forge model, a T5Config or a preset name; `mode` is 'predict' or 'score'.
    """
    from t5forge.data.providers.mixture import get_mixture_or_task

    model = setup.resolve_model(model)
    setup.register_tasks(dataset_cfg)
    if mode not in MODES:
        raise ConfigError(f"infer.mode must be one of {MODES}, not {mode!r}")
    if not restore_checkpoint_cfg.path:
        raise ConfigError(
            "set CHECKPOINT_PATH (--gin.CHECKPOINT_PATH=...) to the checkpoint to run"
        )
    if not dataset_cfg.task_feature_lengths:
        raise ConfigError(
            "set TASK_FEATURE_LENGTHS for inference, e.g. {'inputs': 512, 'targets': 128}"
        )
    output = storage.path(output_dir)
    storage.make_directory(output_dir, "INFER_OUTPUT_DIR")
    params, message = setup.load_params(restore_checkpoint_cfg.path, model)
    print(message, file=sys.stderr)
    decode_length = max_decode_length or setup.default_max_decode_length(
        model, dataset_cfg.task_feature_lengths
    )
    lock = ModelDirLock(
        output_dir,
        lock_file=LOCK_FILE,
        writer="infer",
        take_over_hint=f"delete {os.path.join(output_dir, LOCK_FILE)}",
    )
    lock.acquire()
    written = {}
    try:
        for task in get_mixture_or_task(dataset_cfg.mixture_or_task_name).tasks:
            written[task.name] = _run_task(
                model,
                params,
                task,
                dataset_cfg,
                mode,
                output,
                checkpoint_period,
                decode_length,
                restore_checkpoint_cfg.path,
            )
            print(f"wrote {written[task.name]} rows to {output / f'{task.name}-{mode}.jsonl'}")
    finally:
        lock.release()
    return written
