"""`cache_tasks`: preprocess tasks once, so training reads ready examples (what `t5forge
cache-tasks` runs).

Without a runner one local process writes each split with a progress bar; with one the same
cache is built by an Apache Beam pipeline. Mixtures expand to their tasks; splits already
complete are skipped unless `overwrite`; a split that fails leaves no `COMPLETED` entry, so a
half-written cache is never read.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from t5forge import storage
from t5forge.data.cache import (
    completed_splits,
    default_shard_count,
    publish_split,
    task_cache_dir,
    write_task_cache,
)
from t5forge.errors import ConfigError, DataError

# Runners whose workers share this machine's disk.
LOCAL_RUNNERS = ("DirectRunner", "PrismRunner")


def cache_tasks(
    tasks: Sequence[str],
    output_cache_dir: str,
    *,
    splits: Sequence[str] | None = None,
    min_shards: int = 1,
    overwrite: bool = False,
    runner: str | None = None,
    beam_options: Sequence[str] = (),
    progress: bool = True,
) -> list[tuple[str, str, int]]:
    """Writes the caches of `tasks` (comma-separated names or regexes matched against the whole
    registered name; mixtures expand) under `output_cache_dir`, every split or `splits`.

    `runner` names an Apache Beam runner (`beam_options` are handed to Beam); without it this
    process writes. Returns (task, split, shard count) of each split written.
    """
    wanted = list(splits) if splits else None
    jobs = []
    storage.require_kind(output_cache_dir, "directory", "--output_cache_dir")
    for task in _tasks_to_cache(tasks):
        done = completed_splits(task_cache_dir(output_cache_dir, task.name))
        for split in _splits_to_cache(task, wanted):
            if split in done and not overwrite:
                print(f"skipped {task.name}:{split}: already cached (--overwrite rebuilds it)")
                continue
            jobs.append((task, split, max(min_shards, default_shard_count(task, split))))
    if runner:
        from t5forge.data.beam_cache import SplitJob, run_beam_cache

        run_beam_cache(
            [SplitJob(*job) for job in jobs],
            _beam_output(output_cache_dir, runner),
            [f"--runner={runner}", *beam_options],
        )
        if storage.is_url(output_cache_dir):
            staged = storage.staging_folder(output_cache_dir)
            for task, split, _ in jobs:
                publish_split(
                    task_cache_dir(staged, task.name),
                    task_cache_dir(output_cache_dir, task.name),
                    split,
                )
    for task, split, shards in jobs:
        if not runner:
            write_task_cache(task, split, output_cache_dir, shard_count=shards, progress=progress)
        directory = task_cache_dir(output_cache_dir, task.name)
        print(f"cached {task.name}:{split} -> {directory} ({shards} shards)")
    return [(task.name, split, shards) for task, split, shards in jobs]


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


def _tasks_to_cache(patterns: Sequence[str]) -> list:
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
