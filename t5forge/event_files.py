"""TensorBoard event files, written by tensorboardX's SummaryWriter to any path t5forge takes.

Two things stand between tensorboardX and a t5forge run, both handled here so that every
writer of events (a run's summaries, SeqIO's TensorBoardLogger) gets them:
- tensorboardX imports torch, when it is installed, only to accept torch tensors as values:
  2.1 s and ~190 MB of a process that logs floats. Unless torch is already loaded, it is hidden
  from that one import (tensorboardX then takes numpy values and floats, all t5forge logs).
- `gs://` and `s3://` log directories go through `t5forge.storage`, with the credentials and
  endpoint every other t5forge file uses, not through tensorboardX's own S3 writer.
"""

from __future__ import annotations

import os
import sys

from t5forge import storage

_routed = False


def summary_writer(logdir: str | os.PathLike, purge_step: int | None = None):
    """A tensorboardX SummaryWriter for `logdir` (local or object storage)."""
    global _routed
    summary_writer_class = _import_summary_writer()
    if not _routed:
        from tensorboardX import record_writer

        for scheme in ("s3", "gs"):
            record_writer.register_writer_factory(scheme, _ObjectEventFiles())
        _routed = True
    return summary_writer_class(str(logdir), purge_step=purge_step)


def _import_summary_writer():
    if "torch" in sys.modules or "tensorboardX" in sys.modules:
        from tensorboardX import SummaryWriter

        return SummaryWriter
    sys.modules["torch"] = None  # `import torch` raises ImportError while this is set
    try:
        from tensorboardX import SummaryWriter
    finally:
        if sys.modules.get("torch", 0) is None:
            del sys.modules["torch"]
    return SummaryWriter


class _ObjectEventFile:
    """A TensorBoard event file on an object store, written through `t5forge.storage`.

    Objects cannot be appended to, so the file's bytes are kept and the object is replaced
    whole at each flush (the run flushes after every logged step), as tensorboardX's own S3
    writer does, but with the credentials and endpoint every other t5forge file uses.
    """

    def __init__(self, url: str):
        self.url, self.buffer, self.written = url, bytearray(), 0

    def write(self, data: bytes) -> None:
        self.buffer += data

    def flush(self) -> None:
        if len(self.buffer) != self.written:
            with storage.reported(self.url):
                storage.path(self.url).write_bytes(bytes(self.buffer))
            self.written = len(self.buffer)

    def close(self) -> None:
        self.flush()


class _ObjectEventFiles:
    """tensorboardX's writer factory interface, for `s3://` and `gs://` log directories."""

    def open(self, url: str) -> _ObjectEventFile:
        return _ObjectEventFile(url)

    def directory_check(self, url: str) -> None:
        """Object stores have no directories to create."""
