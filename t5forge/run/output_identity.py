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


def data_fingerprint(tasks: Iterable, split: str) -> dict[str, list[int]]:
    """{data file: [size, CRC-32]} of every file the tasks' split reads (file-based sources;
    a Hugging Face or function source has none to list). The files are read whole by the run
    anyway, so hashing them costs about one more read."""
    from t5forge.data.sources import expand_patterns

    files: dict[str, list[int]] = {}
    for task in tasks:
        patterns = getattr(task.source, "split_patterns", {}).get(split)
        if patterns is None:
            continue
        for name in expand_patterns(patterns, split):
            files[os.fspath(name)] = _size_and_crc(name)
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
                changed = sorted(
                    path
                    for path in set(recorded.get(name) or {}) | set(current.get(name) or {})
                    if (recorded.get(name) or {}).get(path) != (current.get(name) or {}).get(path)
                )
                return f"data files changed ({changed[0]}{' ...' if len(changed) > 1 else ''})"
            return f"{name}: {_short(recorded.get(name))} -> {_short(current.get(name))}"
    return None


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


def refuse_mismatch(recorded: dict, current: dict, what: str, fix: str) -> None:
    """ConfigError when `current` is not the identity recorded for `what`."""
    difference = first_difference(recorded, current)
    if difference is not None:
        raise ConfigError(f"{what} was written by another run ({difference}); {fix}")
