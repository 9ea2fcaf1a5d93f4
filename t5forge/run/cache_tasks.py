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
from t5forge.data.cache.store import (
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
    excluded_tasks: Sequence[str] = (),
    other_cache_dirs: Sequence[str] = (),
    ignore_other_caches: bool = False,
    min_shards: int = 1,
    max_shards: int = 0,
    overwrite: bool = False,
    seed: int = 0,
    char_counts: bool = False,
    runner: str | None = None,
    beam_options: Sequence[str] = (),
    progress: bool = True,
) -> list[tuple[str, str, int]]:
    """Writes the caches of `tasks` (comma-separated names or regexes matched against the whole
    registered name; mixtures expand) under `output_cache_dir`, every split or `splits`.

    As SeqIO's cache_tasks: tasks whose name `excluded_tasks` (regexes) match are left out; a
    split already complete in `other_cache_dirs` (or the global cache directories) is not
    written again unless `ignore_other_caches`; `overwrite` rebuilds only what
    `output_cache_dir` holds; shards are at least `min_shards` and at most `max_shards`
    (0: no cap); `seed` is the random steps' (SeqIO's --base_seed); `char_counts` adds
    `<feature>_chars` to the stats. `runner` names an Apache Beam runner (`beam_options` are
    handed to Beam); without it this process writes. Returns (task, split, shard count) of
    each split written.
    """
    wanted = list(splits) if splits else None
    jobs = []
    storage.require_kind(output_cache_dir, "directory", "--output_cache_dir")
    others = [] if ignore_other_caches else _other_cache_dirs(output_cache_dir, other_cache_dirs)
    for task in _tasks_to_cache(tasks, excluded_tasks):
        done = completed_splits(task_cache_dir(output_cache_dir, task.name))
        cached_elsewhere = _completed_elsewhere(task.name, others)
        for split in _splits_to_cache(task, wanted):
            if split in done and not overwrite:
                print(f"skipped {task.name}:{split}: already cached (--overwrite rebuilds it)")
                continue
            if split in cached_elsewhere:
                print(
                    f"skipped {task.name}:{split}: already cached in {cached_elsewhere[split]} "
                    "(--ignore_other_caches writes it here too)"
                )
                continue
            shards = max(min_shards, default_shard_count(task, split))
            jobs.append((task, split, min(shards, max_shards) if max_shards > 0 else shards))
    if runner:
        from t5forge.data.cache.beam import SplitJob, run_beam_cache

        run_beam_cache(
            [SplitJob(*job, seed=seed, char_counts=char_counts) for job in jobs],
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
            write_task_cache(
                task, split, output_cache_dir, shards, progress, seed=seed, char_counts=char_counts
            )
        directory = task_cache_dir(output_cache_dir, task.name)
        print(f"cached {task.name}:{split} -> {directory} ({shards} shards)")
    return [(task.name, split, shards) for task, split, shards in jobs]


def _other_cache_dirs(output_cache_dir: str, extra: Sequence[str]) -> list[str]:
    from t5forge.data.cache.search_dirs import get_global_cache_dirs

    output = str(output_cache_dir).rstrip("/")
    dirs = [*extra, *get_global_cache_dirs()]
    return [d for d in dict.fromkeys(str(d).rstrip("/") for d in dirs) if d and d != output]


def _completed_elsewhere(task_name: str, cache_dirs: Sequence[str]) -> dict[str, str]:
    """Split -> the first of `cache_dirs` holding its complete cache (one read per directory)."""
    found: dict[str, str] = {}
    for directory in cache_dirs:
        for split in completed_splits(task_cache_dir(directory, task_name)):
            found.setdefault(split, directory)
    return found


def _matching_names(pattern: str) -> list[str]:
    """A registered name itself, else the registered names the regex matches as a whole."""
    from t5forge.data.providers.mixture import MixtureRegistry, TaskRegistry

    registered = TaskRegistry.names() + MixtureRegistry.names()
    if pattern in registered:
        return [pattern]
    try:
        return [name for name in registered if re.fullmatch(pattern, name)]
    except re.error:
        return []


def _patterns(groups: Sequence[str]) -> list[str]:
    return [p for group in groups for p in (n.strip() for n in group.split(",")) if p]


def _tasks_to_cache(patterns: Sequence[str], excluded: Sequence[str] = ()) -> list:
    from t5forge.data.providers.mixture import get_mixture_or_task

    tasks = {}
    for pattern in _patterns(patterns):
        # An unmatched pattern is looked up by name, for the error with close names.
        for name in _matching_names(pattern) or [pattern]:
            for task in get_mixture_or_task(name).tasks:
                tasks[task.name] = task
    if not tasks:
        raise DataError("--tasks is empty; name at least one task, e.g. --tasks=my_task")
    for pattern in _patterns(excluded):
        try:
            left_out = [name for name in tasks if re.fullmatch(pattern, name)]
        except re.error as error:
            raise ConfigError(f"--excluded_tasks={pattern!r} is not a regex: {error}") from None
        for name in left_out:
            print(f"skipped {name}: --excluded_tasks={pattern}")
            del tasks[name]
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
