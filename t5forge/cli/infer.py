"""`t5forge infer`: predictions (or scores) for a task's split, written as T5X does.

    t5forge infer --gin_file=runs/infer.gin --gin.CHECKPOINT_PATH=/tmp/run/checkpoint_1000 \\
        --gin.INFER_OUTPUT_DIR=/tmp/infer --gin.MIXTURE_OR_TASK_NAME=en_de_lohelp_translate

Parses flags and gin, then calls the library's `t5forge.run.infer`, which writes
`<task>-<mode>.jsonl` and continues an interrupted run after its last finished chunk.
"""

from __future__ import annotations

from t5forge.cli import run_flags
from t5forge.cli.commands import COMMANDS
from t5forge.gin_config import gin_registry

HELP = COMMANDS["infer"].summary


def main(argv: list[str]) -> int:
    if run_flags.configure_run(argv, HELP, "infer"):
        with run_flags.configured_calls():
            gin_registry.infer()
    return 0
