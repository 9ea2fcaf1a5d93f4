"""`t5forge cache-tasks`: preprocess tasks once, so training reads ready examples.

Flags follow SeqIO's `seqio_cache_tasks` (`--tasks` names or regexes, `--output_cache_dir`,
`--module_import`, `--min_shards`, `--overwrite`) so existing scripts keep working. Without
`--runner` one local process writes each split with a progress bar; with `--runner` the same
cache is built by an Apache Beam pipeline (DirectRunner here; Dataflow, Flink, Spark or Prism
with Beam's own options, which pass through). Mixtures expand to their tasks; splits already
complete are skipped unless `--overwrite`; a split that fails leaves no `COMPLETED` entry, so
a half-written cache is never read.
"""

from __future__ import annotations

import argparse
import os
import re

from t5forge import storage
from t5forge.data.cache import (
    completed_splits,
    default_shard_count,
    publish_split,
    task_cache_dir,
    write_task_cache,
)
from t5forge.errors import ConfigError, DataError
from t5forge.run.task_modules import import_task_modules

HELP = "preprocess tasks up to their cache point and write ArrayRecord caches"
EPILOG = """\
Beam: `--runner=DirectRunner --direct_num_workers=2 --direct_running_mode=multi_threading`
runs on this machine; `--runner=DataflowRunner --project=P --region=R --temp_location=gs://...`,
`--runner=FlinkRunner --flink_master=HOST:8081` or `--runner=SparkRunner` run elsewhere (any
flag this command does not know is handed to Beam). Needs `pip install 't5forge[beam]'`.
"""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="t5forge cache-tasks",
        description=HELP,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,  # a Beam option must never be taken for an abbreviation
    )
    parser.add_argument(
        "--tasks",
        action="append",
        required=True,
        help="comma-separated task or mixture names, or regexes matched against the whole "
        "registered name, e.g. 'glue_.*' (repeatable)",
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
        "--overwrite", action="store_true", help="rebuild splits whose cache is already complete"
    )
    parser.add_argument(
        "--runner",
        help="build the caches with this Apache Beam runner (DirectRunner, DataflowRunner, "
        "FlinkRunner, SparkRunner, PrismRunner); default: one local process",
    )
    parser.add_argument(
        "--vocab", help="SentencePiece model for built-in tasks (default: $T5FORGE_VOCAB)"
    )
    parser.add_argument("--no_progress", action="store_true", help="hide the progress bars")
    return parser


def _matching_names(pattern: str) -> list[str]:
    """A registered name itself, else the registered names the regex matches as a whole."""
    from t5forge.data.tasks import MixtureRegistry, TaskRegistry

    registered = TaskRegistry.names() + MixtureRegistry.names()
    if pattern in registered:
        return [pattern]
    try:
        return [name for name in registered if re.fullmatch(pattern, name)]
    except re.error:
        return []


def _tasks_to_cache(patterns: list[str]) -> list:
    from t5forge.data.tasks import get_mixture_or_task

    tasks = {}
    for group in patterns:
        for pattern in filter(None, (n.strip() for n in group.split(","))):
            # An unmatched pattern is looked up by name, for the error with close names.
            for name in _matching_names(pattern) or [pattern]:
                for task in get_mixture_or_task(name).tasks:
                    tasks[task.name] = task
    if not tasks:
        raise DataError("--tasks is empty; name at least one task, e.g. --tasks=my_task")
    return list(tasks.values())


def _splits_to_cache(task, wanted: list[str] | None) -> list[str]:
    splits = wanted or list(task.splits)
    unknown = [s for s in splits if s not in task.splits]
    if unknown:
        raise DataError(
            f"task {task.name!r} has no split {unknown[0]!r}; splits: {', '.join(task.splits)}"
        )
    return splits


# Runners whose workers share this machine's disk.
LOCAL_RUNNERS = ("DirectRunner", "PrismRunner")


def _beam_output(output_cache_dir: str, runner: str) -> str:
    """Where Beam's workers write: the directory itself, or for a bucket a local staging folder
    that is copied up once the pipeline finished (ArrayRecord writes local files only)."""
    if not storage.is_url(output_cache_dir):
        return output_cache_dir
    if runner not in LOCAL_RUNNERS:
        raise ConfigError(
            f"--output_cache_dir={output_cache_dir}: workers of the {runner} write ArrayRecord "
            "shards to a file system they share, not to object storage yet; give a path on a "
            "shared file system, or run on this machine (--runner=DirectRunner), whose cache "
            "t5forge copies to the bucket"
        )
    return str(storage.staging_folder(output_cache_dir))


def main(argv: list[str]) -> int:
    args, beam_args = _parser().parse_known_args(argv)
    if beam_args and not args.runner:
        raise ConfigError(
            f"cache-tasks does not know {beam_args[0]!r}; Beam pipeline options need "
            "--runner (e.g. --runner=DirectRunner), see `t5forge cache-tasks --help`"
        )
    if args.vocab:
        os.environ["T5FORGE_VOCAB"] = args.vocab
    import_task_modules(args.module_import)
    wanted = [s.strip() for s in args.splits.split(",") if s.strip()] if args.splits else None
    jobs = []
    for task in _tasks_to_cache(args.tasks):
        done = completed_splits(task_cache_dir(args.output_cache_dir, task.name))
        for split in _splits_to_cache(task, wanted):
            if split in done and not args.overwrite:
                print(f"skipped {task.name}:{split}: already cached (--overwrite rebuilds it)")
                continue
            jobs.append((task, split, max(args.min_shards, default_shard_count(task, split))))
    if args.runner:
        from t5forge.data.beam_cache import SplitJob, run_beam_cache

        run_beam_cache(
            [SplitJob(*job) for job in jobs],
            _beam_output(args.output_cache_dir, args.runner),
            [f"--runner={args.runner}", *beam_args],
        )
        if storage.is_url(args.output_cache_dir):
            staged = storage.staging_folder(args.output_cache_dir)
            for task, split, _ in jobs:
                publish_split(
                    task_cache_dir(staged, task.name),
                    task_cache_dir(args.output_cache_dir, task.name),
                    split,
                )
    for task, split, shards in jobs:
        if not args.runner:
            write_task_cache(
                task,
                split,
                args.output_cache_dir,
                shard_count=shards,
                progress=not args.no_progress,
            )
        directory = task_cache_dir(args.output_cache_dir, task.name)
        print(f"cached {task.name}:{split} -> {directory} ({shards} shards)")
    return 0
