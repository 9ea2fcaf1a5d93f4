"""Fallback disk-full injection: `python python_enospc.py BUDGET DIR t5forge-args...` runs the
real `t5forge` command with Python-level writes under DIR failing with ENOSPC once BUDGET bytes
were written there.

Used only where a tmpfs cannot be mounted (test_storage.py runs it everywhere too, so that CI,
which runs as root, exercises it). It reaches only writes made through Python's `open`
(metrics, checksums, orbax's metadata, the data position); TensorStore writes the arrays from
C++ and is not reached, so the real tmpfs cases remain the ones that fill the disk under it.
"""

from __future__ import annotations

import builtins
import errno
import io
import os
import sys

# The disk's free bytes, shared by every file under DIR, as one file system's would be.
_free = [0]


class _FullDiskFile:
    """A writable file under DIR whose writes fail with ENOSPC once the shared budget is spent."""

    def __init__(self, file, path: str):
        self._file, self._path = file, path

    def write(self, data):
        size = len(data.encode() if isinstance(data, str) else data)
        if size > _free[0]:
            _free[0] = 0
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), self._path)
        _free[0] -= size
        return self._file.write(data)

    def writelines(self, lines):
        for line in lines:
            self.write(line)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._file.close()

    def __iter__(self):
        return iter(self._file)

    def __getattr__(self, name):
        return getattr(self._file, name)


def install(budget: int, directory: str) -> None:
    """Wraps `open` (builtins and io, which pathlib calls) for files opened to write under
    `directory`."""
    _free[0] = budget
    root = os.path.realpath(directory) + os.sep
    real_open = io.open

    def open_with_budget(file, mode="r", *args, **kwargs):
        opened = real_open(file, mode, *args, **kwargs)
        if isinstance(file, int) or not set(mode) & set("wax+"):
            return opened
        path = os.path.realpath(os.fspath(file))
        return _FullDiskFile(opened, path) if path.startswith(root) else opened

    builtins.open = io.open = open_with_budget


if __name__ == "__main__":
    install(int(sys.argv[1]), sys.argv[2])
    from t5forge.cli.main import main

    sys.exit(main(sys.argv[3:]))
