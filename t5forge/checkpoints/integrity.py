"""Checksums of what a checkpoint save wrote, verified before a restore trusts the checkpoint.

Orbax writes atomically, so a crash never leaves a half-written `checkpoint_<step>/`; but bits
can still rot or be overwritten later, and a flipped bit inside an array file restores without
a word. So every file a save wrote is hashed (CRC-32 from zlib: it runs at memory speed, a small
fraction of the write) into `checkpoint_<step>/checksums.json` before the directory is committed,
and a restore recomputes them first. A damaged checkpoint is moved aside to
`checkpoint_<step>.corrupt`, out of the way of restores, `eval`, `convert` and `t5forge.load`.
Checkpoints without the file (written before it existed, or by other tools, or whose file was
lost) restore as before; if one then fails to restore, its arrays are read back as saved, and
unreadable arrays move it aside too (readable ones mean it does not fit the run: refused).
"""

from __future__ import annotations

import json
import os
import zlib
from pathlib import Path

from t5forge import storage
from t5forge.errors import CheckpointError

CHECKSUMS_FILE = "checksums.json"
CORRUPT_SUFFIX = ".corrupt"
# Orbax's own step-level bookkeeping, rewritten after the items are committed: not hashed.
_UNHASHED = {CHECKSUMS_FILE, "_CHECKPOINT_METADATA", "commit_success.txt"}
_CHUNK = 8 << 20


def _crc32(path: Path) -> int:
    crc = 0
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            crc = zlib.crc32(chunk, crc)
    return crc


def _hashed_files(step_dir: Path) -> list[Path]:
    return sorted(
        p
        for p in step_dir.rglob("*")
        if p.is_file() and not (p.parent == step_dir and p.name in _UNHASHED)
    )


def seal(step_dir: str | os.PathLike) -> None:
    """Records the size and CRC-32 of every file under `step_dir` in its checksums.json."""
    step_dir = Path(step_dir)
    files = {
        str(p.relative_to(step_dir)): [p.stat().st_size, _crc32(p)] for p in _hashed_files(step_dir)
    }
    storage.write_atomically(
        step_dir / CHECKSUMS_FILE, json.dumps({"algorithm": "crc32", "files": files}, indent=0)
    )


def verify(step_dir: str | os.PathLike) -> int:
    """Raises CheckpointError naming the first missing or changed file; returns files checked.

    A checkpoint without checksums.json returns 0 (nothing to compare against).
    """
    step_dir = Path(step_dir)
    record_path = step_dir / CHECKSUMS_FILE
    if not record_path.is_file():
        return 0
    try:
        files = json.loads(record_path.read_text())["files"]
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as error:
        raise CheckpointError(
            f"{record_path} is unreadable ({type(error).__name__}); the "
            "checkpoint cannot be verified"
        ) from None
    for name, (size, crc) in sorted(files.items()):
        path = step_dir / name
        if not path.is_file():
            raise CheckpointError(f"{path} is missing (it was written by the save)")
        if path.stat().st_size != size:
            raise CheckpointError(
                f"{path} has {path.stat().st_size} bytes but the save wrote {size}"
            )
        if _crc32(path) != crc:
            raise CheckpointError(f"{path} changed after it was saved (checksum mismatch)")
    return len(files)


def quarantine(step_dir: str | os.PathLike, suffix: str = CORRUPT_SUFFIX) -> Path:
    """Renames a damaged checkpoint_<step> to checkpoint_<step>.corrupt (.corrupt.2, ...), out
    of the way of every reader (another `suffix` names another reason)."""
    step_dir = Path(step_dir)
    target = step_dir.with_name(step_dir.name + suffix)
    attempt = 1
    while target.exists():
        attempt += 1
        target = step_dir.with_name(f"{step_dir.name}{suffix}.{attempt}")
    step_dir.rename(target)
    return target
