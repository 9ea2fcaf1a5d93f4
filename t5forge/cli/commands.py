"""The commands `t5forge` dispatches to, each with its module in t5forge.cli and its one-line
summary (the module's `HELP`).

The summaries live here rather than in the command modules, which import JAX and the run
stack (over a second), so that `t5forge --help` lists every command without importing any.
"""

from __future__ import annotations

from typing import NamedTuple


class Command(NamedTuple):
    module: str  # t5forge.cli.<module> exposes main(argv) -> int
    summary: str


COMMANDS = {
    "train": Command("train", "train a model (T5X flags: --gin_file, --gin.NAME=VALUE)"),
    "eval": Command("evaluate", "evaluate checkpoints on a task's eval split (T5X flags)"),
    "infer": Command("infer", "write predictions or scores for a task's split (T5X flags)"),
    "cache-tasks": Command(
        "cache_tasks", "preprocess tasks up to their cache point and write ArrayRecord caches"
    ),
    "convert": Command(
        "convert", "convert checkpoints: --from {hf,t5x,mesh_tf,t5forge} --to {t5forge,hf,t5x}"
    ),
    "vocab": Command(
        "vocab", "train a SentencePiece vocabulary with T5's ids (pad 0, eos 1, unk 2)"
    ),
    "tasks": Command(
        "tasks", "list registered tasks and mixtures, show one, or preview its processed examples"
    ),
    "demo": Command(
        "demo", "train, evaluate and use a small English->German model on bundled data"
    ),
    "serve": Command(
        "serve", "serve a model over HTTP with dynamic batching (predict, score, classify, stream)"
    ),
    "checkpoint": Command(
        "checkpoint", "check a checkpoint: `verify PATH` (checksums, metadata, every array finite)"
    ),
}
