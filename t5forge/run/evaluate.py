"""Evaluation (T5X's `eval`): the task's metrics for one checkpoint or every checkpoint of a run.

With `RestoreCheckpointConfig(mode='all')` and a model dir as the path, every checkpoint_<step>
in it is evaluated in step order (T5X's eval over a run); `mode='latest'` takes the newest.
A checkpoint that cannot be read is skipped with a warning and the others are still evaluated.
The output directory records what wrote it (the run, task, split, lengths, settings,
data files): each step of that run has one row of metrics, a step evaluated again
replaces its rows instead of repeating them, and another evaluation into the directory is
refused.
`t5forge eval` is the command-line face of `evaluate`.
"""

from __future__ import annotations

import json
import os
import re
import sys

from t5forge import storage
from t5forge.checkpoints.remote_model_dir import complete_steps
from t5forge.errors import CheckpointError, ConfigError
from t5forge.run import output_identity, setup
from t5forge.run.dataset_and_checkpoint_configs import DatasetConfig, RestoreCheckpointConfig
from t5forge.run.training_and_inference_eval import InferenceEvaluation
from t5forge.training.summaries import MetricsWriter

IDENTITY_FILE = ".t5forge-eval.json"


def _checkpoints(cfg: RestoreCheckpointConfig) -> list[tuple[int, os.PathLike]]:
    path = storage.path(cfg.path)
    if cfg.mode in ("all", "latest") and storage.is_url(path):
        steps = [(s, path / f"checkpoint_{s}") for s in complete_steps(os.fspath(path))]
        if not steps:
            raise CheckpointError(f"no complete checkpoint_<step> in {path}")
        return steps if cfg.mode == "all" else steps[-1:]
    if cfg.mode in ("all", "latest"):
        steps = sorted(
            (int(p.name.split("_")[-1]), p)
            for p in path.glob("checkpoint_*")
            if p.name.split("_")[-1].isdigit()
        )
        if not steps:
            raise CheckpointError(f"no checkpoint_<step> directories in {path}")
        return steps if cfg.mode == "all" else steps[-1:]
    step = int(path.name.split("_")[-1]) if path.name.split("_")[-1].isdigit() else 0
    return [(step, path)]


def evaluate(
    *,
    model,
    dataset_cfg: DatasetConfig,
    restore_checkpoint_cfg: RestoreCheckpointConfig,
    output_dir: str,
    max_decode_length: int | None = None,
) -> dict:
    """Runs every checkpoint through the task's metrics; returns {step: {task: metrics}}.

    `model` is a t5forge model, a T5Config or a preset name; predictions and metrics go to
    `output_dir` (JSONL and TensorBoard events).
    """
    model = setup.resolve_model(model)
    setup.register_tasks(dataset_cfg)
    if not restore_checkpoint_cfg.path:
        raise ConfigError(
            "set CHECKPOINT_PATH (--gin.CHECKPOINT_PATH=...) to the checkpoint to evaluate"
        )
    output = storage.path(output_dir)
    storage.make_directory(output_dir, "EVAL_OUTPUT_DIR")
    checkpoints = _checkpoints(restore_checkpoint_cfg)
    _claim(output, _identity(restore_checkpoint_cfg, dataset_cfg, max_decode_length))
    _forget_steps(output, {step for step, _ in checkpoints})
    writer = MetricsWriter(output)
    evaluation = InferenceEvaluation(
        model, dataset_cfg, output, writer, max_decode_length, output_dir=output
    )
    results = {}
    for step, path in checkpoints:
        try:
            params, message = setup.load_params(str(path), model)
        except CheckpointError as error:
            if len(checkpoints) == 1:
                raise
            # One damaged checkpoint of a run must not cost the evaluation of the others.
            print(f"warning: skipping {path}: {str(error).splitlines()[0]}", file=sys.stderr)
            continue
        print(message, file=sys.stderr)
        results[step] = evaluation.run(step, params)
        print(json.dumps({"step": step, **results[step]}))
    writer.close()
    if not results:
        raise CheckpointError(
            f"none of the {len(checkpoints)} checkpoints in "
            f"{restore_checkpoint_cfg.path} could be read"
        )
    return results


def _identity(restore_cfg: RestoreCheckpointConfig, dataset_cfg: DatasetConfig, decode) -> dict:
    from t5forge.data.providers.mixture import get_mixture_or_task

    tasks = get_mixture_or_task(dataset_cfg.mixture_or_task_name).tasks
    return {
        # The run, not the step: each step of one run adds its own rows to the directory.
        "run": _run_of(restore_cfg.path),
        "task": dataset_cfg.mixture_or_task_name,
        "split": dataset_cfg.split,
        "task_feature_lengths": dict(dataset_cfg.task_feature_lengths or {}),
        "max_decode_length": decode,
        "data": output_identity.data_fingerprint(tasks, dataset_cfg.split, dataset_cfg.use_cached),
    }


def _run_of(checkpoint: str) -> str:
    """The model dir of a checkpoint_<step> path; any other checkpoint path as given."""
    text = os.fspath(checkpoint).rstrip("/")
    text = text if storage.is_url(text) else os.path.abspath(text)
    parent, _, name = text.rpartition("/")
    return parent if re.fullmatch(r"checkpoint_\d+", name) else text


def _claim(output, identity: dict) -> None:
    """Records `identity` in the directory, or refuses when another evaluation wrote it."""
    record = output / IDENTITY_FILE
    storage.require_kind(record, "file", "the evaluation record")
    if record.exists():
        try:
            recorded = json.loads(record.read_text())
        except ValueError:
            recorded = {"unreadable": str(record)}
        output_identity.refuse_mismatch(
            recorded,
            identity,
            f"EVAL_OUTPUT_DIR {output}",
            "give another EVAL_OUTPUT_DIR, or delete this one to start it over",
        )
    storage.write_atomically(record, json.dumps(identity, indent=1))


def _forget_steps(output, steps: set[int]) -> None:
    """Drops the metric rows of the steps about to be evaluated again (every *metrics.jsonl),
    so a rerun replaces its rows instead of repeating them."""
    for path in output.glob("*metrics.jsonl"):
        lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
        kept = [line for line in lines if _row_step(line) not in steps | {None}]
        if len(kept) != len(lines):
            storage.write_atomically(path, "".join(kept))


def _row_step(line: str) -> int | None:
    """The step of a metrics row; None for a blank or torn one (a killed run's last line)."""
    try:
        row = json.loads(line)
    except ValueError:
        return None
    return row.get("step") if isinstance(row, dict) else None
