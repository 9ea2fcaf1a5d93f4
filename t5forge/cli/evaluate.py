"""`t5forge eval`: the task's metrics for one checkpoint, or for every checkpoint of a run.

    t5forge eval --gin_file=runs/eval.gin --gin.CHECKPOINT_PATH=/tmp/run/checkpoint_1000 \\
        --gin.EVAL_OUTPUT_DIR=/tmp/eval --gin.MIXTURE_OR_TASK_NAME=en_de_lohelp_translate

With `utils.RestoreCheckpointConfig.mode = 'all'` and CHECKPOINT_PATH a model dir, every
checkpoint_<step> in it is evaluated in step order (T5X's eval over a run).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import gin

from t5forge.cli import run_setup
from t5forge.cli.run_config import DatasetConfig, RestoreCheckpointConfig
from t5forge.cli.run_eval import InferenceEvaluation
from t5forge.errors import CheckpointError, ConfigError
from t5forge.training.summaries import MetricsWriter

HELP = "evaluate checkpoints on a task's eval split (T5X flags)"


def _checkpoints(cfg: RestoreCheckpointConfig) -> list[tuple[int, Path]]:
    path = Path(cfg.path)
    if cfg.mode == "all":
        steps = sorted((int(p.name.split("_")[-1]), p) for p in path.glob("checkpoint_*")
                       if p.name.split("_")[-1].isdigit())
        if not steps:
            raise CheckpointError(f"no checkpoint_<step> directories in {path}")
        return steps
    if cfg.mode != "specific":
        raise ConfigError(f"RestoreCheckpointConfig.mode must be 'specific' or 'all', not {cfg.mode!r}")
    step = int(path.name.split("_")[-1]) if path.name.split("_")[-1].isdigit() else 0
    return [(step, path)]


@gin.configurable
def evaluate(*, model, dataset_cfg: DatasetConfig, restore_checkpoint_cfg: RestoreCheckpointConfig,
             output_dir: str, max_decode_length: int | None = None) -> dict:
    """Runs every checkpoint through the task's metrics; returns {step: {task: metrics}}."""
    if not restore_checkpoint_cfg.path:
        raise ConfigError("set CHECKPOINT_PATH (--gin.CHECKPOINT_PATH=...) to the checkpoint to evaluate")
    output = Path(output_dir)
    output.mkdir(parents=True, exist_ok=True)
    writer = MetricsWriter(output)
    evaluation = InferenceEvaluation(model, dataset_cfg, output, writer, max_decode_length,
                                     output_dir=output)
    results = {}
    for step, path in _checkpoints(restore_checkpoint_cfg):
        params, message = run_setup.load_params(str(path), model)
        print(message, file=sys.stderr)
        results[step] = evaluation.run(step, params)
        print(json.dumps({"step": step, **results[step]}))
    writer.close()
    return results


def main(argv: list[str]) -> int:
    if run_setup.configure_run(argv, HELP, "eval"):
        evaluate()
    return 0
