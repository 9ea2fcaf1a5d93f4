"""`t5forge eval`: the task's metrics for one checkpoint, or for every checkpoint of a run.

    t5forge eval --gin_file=runs/eval.gin --gin.CHECKPOINT_PATH=/tmp/run/checkpoint_1000 \\
        --gin.EVAL_OUTPUT_DIR=/tmp/eval --gin.MIXTURE_OR_TASK_NAME=en_de_lohelp_translate

With `utils.RestoreCheckpointConfig.mode = 'all'` and CHECKPOINT_PATH a model dir, every
checkpoint_<step> in it is evaluated in step order (T5X's eval over a run). Parses flags and
gin, then calls the library's `t5forge.run.evaluate`.
"""

from __future__ import annotations

from t5forge.cli import run_flags
from t5forge.cli.commands import COMMANDS
from t5forge.gin_config import gin_registry

HELP = COMMANDS["eval"].summary


def main(argv: list[str]) -> int:
    if run_flags.configure_run(argv, HELP, "eval"):
        with run_flags.configured_calls():
            gin_registry.evaluate()
    return 0
