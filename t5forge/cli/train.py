"""`t5forge train`: T5X's training command, configured with gin.

    t5forge train --gin_file=runs/finetune.gin --gin_file=models/t5_1_1/small.gin \\
        --gin.MODEL_DIR=/tmp/run --gin.MIXTURE_OR_TASK_NAME=en_de_lohelp_translate

Parses flags and gin, then calls the library's `t5forge.run.train`. Rerunning the same command
after a preemption resumes from MODEL_DIR's latest checkpoint; raising TRAIN_STEPS extends a
finished run.
"""

from __future__ import annotations

from t5forge.cli import run_flags
from t5forge.cli.commands import COMMANDS
from t5forge.errors import ConfigError
from t5forge.gin_config import gin_registry

HELP = COMMANDS["train"].summary


def main(argv: list[str], precompile_only: bool = False) -> int:
    """`precompile_only`: T5X's --run_mode=precompile, which needs precompile.gin's bindings."""
    if not run_flags.configure_run(argv, HELP, "train"):
        return 0
    requested = gin_registry.precompile_requested()
    if precompile_only and not requested:
        raise ConfigError(
            "--run_mode=precompile needs T5X's precompile configuration; add "
            "--gin_file=runs/precompile.gin"
        )
    try:
        with run_flags.configured_calls():
            if requested:  # T5X's precompile.gin: compile, no steps
                gin_registry.precompile()
                return 0
            gin_registry.train(summarize_config_fn=run_flags.write_gin_config)
    except TypeError as e:
        if "missing" in str(e) and "required" in str(e):
            missing = str(e).splitlines()[0].split(":", 1)[-1].strip()
            raise ConfigError(
                f"incomplete gin config for train, missing {missing}; include "
                "runs/pretrain.gin or runs/finetune.gin (--gin_file=...)"
            ) from None
        raise
    return 0
