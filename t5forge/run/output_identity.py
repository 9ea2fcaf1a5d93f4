"""Who wrote a resumable output: the checkpoint, task, split, lengths, batch size, settings and a
fingerprint of the data files, recorded beside the output and compared on every rerun.

A resume that continues another run's output mixes two runs' rows without a word (rows from
two checkpoints, a batch count read with another batch size); a rerun whose identity differs is
refused in one line naming the first difference and the fix instead.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Iterable

from t5forge import storage
from t5forge.errors import ConfigError

_CHUNK = 8 << 20


def data_fingerprint(tasks: Iterable, split: str) -> list[list]:
    """[file name, size, CRC-32] of every file the tasks' split reads, in reading order
    (file-based sources; a Hugging Face or function source has none to list). Names without
    their folder: the same files moved elsewhere (another T5FORGE_DATA_DIR) are the same data.
    The files are read whole by the run anyway, so hashing them costs about one more read."""
    from t5forge.data.sources import expand_patterns

    files = []
    for task in tasks:
        patterns = getattr(task.source, "split_patterns", {}).get(split)
        if patterns is None:
            continue
        for name in expand_patterns(patterns, split):
            files.append([os.path.basename(os.fspath(name)), *_size_and_crc(name)])
    return files


def _size_and_crc(name: str) -> list[int]:
    crc, size = 0, 0
    with storage.reported(name), storage.open_file(name, "rb") as f:
        while chunk := f.read(_CHUNK):
            crc, size = zlib.crc32(chunk, crc), size + len(chunk)
    return [size, crc]


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
        if before != now:
            return f"data file {now[0]} changed (size {before[1]} -> {now[1]})"
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
