"""Who wrote a resumable output: the checkpoint, task, split, lengths, batch size, settings and a
fingerprint of the data files (of every source kind), recorded beside the output and compared
on every rerun.

A resume that continues another run's output mixes two runs' rows without a word (rows from
two checkpoints, a batch count read with another batch size); a rerun whose identity differs is
refused in one line naming the first difference and the fix instead.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor

from t5forge import storage
from t5forge.errors import ConfigError, DataError

_CHUNK = 8 << 20
# A file up to this size is hashed whole; a larger one by its first and last _SAMPLE bytes.
_WHOLE_FILE_LIMIT = 64 << 20
_SAMPLE = 1 << 20
_PARALLEL_READS = 16


def data_fingerprint(tasks: Iterable, split: str, use_cached: bool = False) -> list[list]:
    """[file name, size, CRC-32] of every file the tasks' split reads, in reading order: a
    file source's files, a TFDS dataset's dataset_info.json, features.json and shards, a
    TFExample source's files; with `use_cached` the same, or the task cache's shards, info and
    stats where the source's files are not here (a Hugging Face or function source has none to
    list). Names without their folder: the same files moved elsewhere (another
    T5FORGE_DATA_DIR) are the same data.

    A file up to 64 MiB is hashed whole (about one more read of data the run reads anyway);
    a larger one, such as a TFDS shard of C4 (hundreds of them, ~300 MiB each, re-hashed at
    every start), by its size and its first and last MiB, which a rewritten or appended shard
    changes; an edit inside it that keeps its size is not seen."""
    names = [name for task in tasks for name in _data_files(task, split, use_cached)]
    with ThreadPoolExecutor(_PARALLEL_READS) as pool:
        sums = list(pool.map(_size_and_crc, names))
    return [[os.path.basename(os.fspath(name)), *sizes] for name, sizes in zip(names, sums)]


def _data_files(task, split: str, use_cached: bool) -> list:
    """The source's files, even when the run reads the task's cache: the cache is made from
    them in their uncached order, so a run started on the source may resume on its cache (and
    a cache rebuilt from changed files is seen through them). The cache's own files stand in
    only where the source's are not here (a cache made on another machine, or by Beam)."""
    # Not `data_files`: HuggingFaceSource keeps its constructor's `data_files` mapping there.
    listed = getattr(task.source, "fingerprinted_files", None)
    if not use_cached:
        return listed(split) if listed is not None else []
    try:
        source_files = listed(split) if listed is not None else []
    except (DataError, OSError):
        source_files = []
    if source_files and all(storage.path(name).exists() for name in source_files):
        return source_files
    from t5forge.data.cache.search_dirs import get_global_cache_dirs
    from t5forge.data.cache.store import completed_cache_dir, split_files

    task_dir = completed_cache_dir(task.name, split, get_global_cache_dirs())
    return split_files(task_dir, split) if task_dir is not None else []


def _size_and_crc(name) -> list[int]:
    with storage.reported(name), storage.open_file(name, "rb") as f:
        size = f.seek(0, os.SEEK_END)
        f.seek(0)
        if size <= _WHOLE_FILE_LIMIT:
            crc = 0
            while chunk := f.read(_CHUNK):
                crc = zlib.crc32(chunk, crc)
            return [size, crc]
        crc = zlib.crc32(f.read(_SAMPLE))
        f.seek(size - _SAMPLE)
        return [size, zlib.crc32(f.read(_SAMPLE), crc)]


def checkpoint_identity(location: str) -> dict:
    """The checkpoint by absolute path and, for a t5forge checkpoint, its recorded checksums
    (so a checkpoint re-saved under the same name is another checkpoint)."""
    text = location if storage.is_url(location) else os.path.abspath(location)
    sums = storage.path(text) / "checksums.json"
    try:
        with storage.reported(sums):
            return {"path": text, "checksums_crc32": zlib.crc32(sums.read_bytes())}
    except (OSError, ValueError):
        return {"path": text}


def first_difference(recorded: dict, current: dict) -> str | None:
    """'name: recorded -> current' of the first setting that differs, or None."""
    for name in sorted(set(recorded) | set(current)):
        if recorded.get(name) != current.get(name):
            if name == "data":
                return _data_difference(recorded.get(name) or [], current.get(name) or [])
            return f"{name}: {_short(recorded.get(name))} -> {_short(current.get(name))}"
    return None


def _data_difference(recorded: list, current: list) -> str:
    for before, now in zip(recorded, current):
        if before[0] != now[0]:
            return f"data file {before[0]} -> {now[0]}"
        if before != now:
            change = f"size {before[1]} -> {now[1]}" if before[1] != now[1] else "same size"
            return f"data file {now[0]} changed ({change})"
    if len(recorded) != len(current):
        return f"data files: {len(recorded)} -> {len(current)}"
    return "data files changed"


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


def refuse_mismatch(recorded: dict, current: dict, what: str, fix: str) -> None:
    """ConfigError when `current` is not the identity recorded for `what`."""
    difference = first_difference(recorded, current)
    if difference is not None:
        raise ConfigError(f"{what} was written by another run ({difference}); {fix}")
