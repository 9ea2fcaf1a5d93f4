"""Evaluation (T5X's `eval`): the task's metrics for one checkpoint or every checkpoint of a run.

With `RestoreCheckpointConfig(mode='all')` and a model dir as the path, every checkpoint_<step>
in it is evaluated in step order (T5X's eval over a run); `mode='latest'` takes the newest.
A checkpoint that cannot be read is skipped with a warning and the others are still evaluated.
`t5forge eval` is the command-line face of `evaluate`.
"""

from __future__ import annotations

import json
import os
import sys

from t5forge import storage
from t5forge.checkpoints.remote_model_dir import complete_steps
from t5forge.errors import CheckpointError, ConfigError
from t5forge.run import setup
from t5forge.run.configs import DatasetConfig, RestoreCheckpointConfig
from t5forge.run.evaluation import InferenceEvaluation
from t5forge.training.summaries import MetricsWriter


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
    with storage.reported(output_dir):
        output.mkdir(parents=True, exist_ok=True)
    writer = MetricsWriter(output)
    evaluation = InferenceEvaluation(
        model, dataset_cfg, output, writer, max_decode_length, output_dir=output
    )
    results = {}
    checkpoints = _checkpoints(restore_checkpoint_cfg)
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
