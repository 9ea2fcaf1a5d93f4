"""`t5forge cache-tasks`: preprocess tasks once, so training reads ready examples.

Flag names follow SeqIO's `seqio_cache_tasks` (`--tasks`, `--output_cache_dir`,
`--module_import`, `--min_shards`) so existing scripts keep working; no Beam, no
TensorFlow. Mixtures expand to their tasks. Each split gets a progress bar, and a split
that fails leaves no `COMPLETED` entry, so a half-written cache is never read.
"""

from __future__ import annotations

import argparse
import os

from t5forge.data.cache import default_shard_count, write_task_cache
from t5forge.errors import DataError
from t5forge.run.task_modules import import_task_modules

HELP = "preprocess tasks up to their cache point and write ArrayRecord caches"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="t5forge cache-tasks", description=HELP)
    parser.add_argument(
        "--tasks",
        action="append",
        required=True,
        help="comma-separated task or mixture names (repeatable)",
    )
    parser.add_argument(
        "--output_cache_dir", required=True, help="directory that receives <task>/ cache folders"
    )
    parser.add_argument(
        "--module_import",
        action="append",
        default=[],
        help="module that registers the tasks (repeatable)",
    )
    parser.add_argument(
        "--splits", default=None, help="comma-separated splits (default: every split of each task)"
    )
    parser.add_argument(
        "--min_shards", type=int, default=1, help="write at least this many shards per split"
    )
    parser.add_argument(
        "--vocab", help="SentencePiece model for built-in tasks (default: $T5FORGE_VOCAB)"
    )
    parser.add_argument("--no_progress", action="store_true", help="hide the progress bars")
    return parser


def _tasks_to_cache(names: list[str]) -> list:
    from t5forge.data.tasks import get_mixture_or_task

    tasks = {}
    for group in names:
        for name in filter(None, (n.strip() for n in group.split(","))):
            for task in get_mixture_or_task(name).tasks:
                tasks[task.name] = task
    if not tasks:
        raise DataError("--tasks is empty; name at least one task, e.g. --tasks=my_task")
    return list(tasks.values())


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    if args.vocab:
        os.environ["T5FORGE_VOCAB"] = args.vocab
    import_task_modules(args.module_import)
    tasks = _tasks_to_cache(args.tasks)
    wanted = [s.strip() for s in args.splits.split(",") if s.strip()] if args.splits else None
    for task in tasks:
        splits = wanted or list(task.splits)
        unknown = [s for s in splits if s not in task.splits]
        if unknown:
            raise DataError(
                f"task {task.name!r} has no split {unknown[0]!r}; splits: {', '.join(task.splits)}"
            )
        for split in splits:
            shards = max(args.min_shards, default_shard_count(task, split))
            directory = write_task_cache(
                task,
                split,
                args.output_cache_dir,
                shard_count=shards,
                progress=not args.no_progress,
            )
            print(f"cached {task.name}:{split} -> {directory} ({shards} shards)")
    return 0
