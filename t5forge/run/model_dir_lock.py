"""One writer per MODEL_DIR: a lease file that a second `train` into the same directory respects.

Two runs writing one model dir interleave their metrics, overwrite each other's checkpoints and
config.gin, and both exit 0. So a run first creates MODEL_DIR/train.lock (host, pid, start
time, lease expiry) and renews the lease while it runs; a second run is refused with one line
naming the holder. A lock whose process is gone (same host) or whose lease expired (another
host, whose processes cannot be checked) is taken over with a warning; `take_over=True` takes
any lock. The lease expiry, not `fcntl`, is what decides across hosts, so the scheme needs only
create-if-absent and overwrite: it works on network file systems and object storage too. On an
object store (`s3://`, `gs://`), which has no exclusive create through its file-system layer,
create-if-absent is "absent, then written, then read back as ours": two runs starting in the
same instant both write, the later write wins, and the other run sees a holder that is not
itself and is refused.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import socket
import threading
import time
from datetime import datetime, timezone

from etils import epath

from t5forge import storage
from t5forge.errors import ConfigError, StorageError

logger = logging.getLogger("t5forge")

LOCK_FILE = "train.lock"
LEASE_SECONDS = 600.0
_HELD: dict[epath.Path, ModelDirLock] = {}


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, owned by another user
        return True
    return True


class ModelDirLock:
    """The lease on one model dir; `acquire()` or refuse, `release()` at the end of the run."""

    def __init__(
        self,
        model_dir: str | os.PathLike,
        take_over: bool = False,
        lease_seconds: float = LEASE_SECONDS,
        lock_file: str = LOCK_FILE,
        writer: str = "training run",
        take_over_hint: str = "pass --gin.train.take_over_lock=True",
    ):
        """`lock_file`, `writer` and `take_over_hint` name another command's lock on its output
        directory (infer's), in the file and in the refusal."""
        location = os.fspath(model_dir)
        self.path = storage.path(
            location if storage.is_url(location) else os.path.abspath(location)
        )
        self.path = self.path / lock_file
        self.take_over, self.writer, self.take_over_hint = take_over, writer, take_over_hint
        self.lease_seconds = lease_seconds
        self._record = {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        }
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None

    def _payload(self) -> str:
        return json.dumps({**self._record, "expires": time.time() + self.lease_seconds})

    def _holder(self) -> dict | None:
        try:
            with storage.reported(self.path):
                holder = json.loads(self.path.read_text())
        except FileNotFoundError:
            return None
        except (ValueError, UnicodeDecodeError):
            return {}  # half-written or garbage: nobody can be shown to hold it
        return holder if isinstance(holder, dict) else {}

    def _is_ours(self, holder: dict | None) -> bool:
        return bool(holder) and all(holder.get(k) == self._record[k] for k in ("host", "pid"))

    def _live(self, holder: dict) -> bool:
        """Whether the holder may still be running: its pid on this host, its lease elsewhere."""
        if holder.get("host") == self._record["host"] and isinstance(holder.get("pid"), int):
            return holder["pid"] != os.getpid() and _process_alive(holder["pid"])
        return float(holder.get("expires", 0)) > time.time()

    def acquire(self) -> None:
        """Takes the lock, or raises ConfigError naming the run that holds it."""
        storage.require_kind(self.path, "file", "the lock")
        try:
            self._create()
        except FileExistsError:
            holder = self._holder() or {}
            if self._live(holder) and not self.take_over:
                raise ConfigError(
                    f"{self.path.parent} is in use by another {self.writer} (pid "
                    f"{holder.get('pid')} on {holder.get('host')}, started "
                    f"{holder.get('started')}); wait for it to finish, use another directory, "
                    f"or, if that run is gone, {self.take_over_hint}"
                ) from None
            if holder.get("pid") != os.getpid() or holder.get("host") != self._record["host"]:
                why = "taken over on request" if self._live(holder) else "its process is gone"
                logger.warning(
                    "taking over the lock %s of pid %s on %s (%s)",
                    self.path,
                    holder.get("pid"),
                    holder.get("host"),
                    why,
                )
            self._write()
        if not self._is_ours(self._holder()):
            raise ConfigError(
                f"another {self.writer} took {self.path} at the same moment; "
                "only one may write this directory"
            )
        _HELD[self.path] = self
        # Registered (again) after the store was first used: exit handlers run last-in first-out,
        # so this one runs before fsspec's closes the event loop a bucket's lock needs.
        atexit.unregister(_release_all)
        atexit.register(_release_all)
        self._stop.clear()
        self._renewer = threading.Thread(target=self._renew, name="t5forge-lock", daemon=True)
        self._renewer.start()

    def _create(self) -> None:
        """Writes the lock where none exists; FileExistsError where one does."""
        if not storage.is_url(self.path):
            with open(self.path, "x") as f:
                f.write(self._payload())
            return
        with storage.reported(self.path):
            if self.path.exists():
                raise FileExistsError(str(self.path))
            self.path.write_text(self._payload())

    def _write(self) -> None:
        storage.write_atomically(self.path, self._payload(), durable=False)

    def _renew(self) -> None:
        while not self._stop.wait(self.lease_seconds / 4):
            if not self._is_ours(self._holder()):
                logger.warning("lost the lock %s to another run", self.path)
                return
            try:
                self._write()
            except (
                OSError,
                StorageError,
            ) as error:  # a full disk must not kill the run from this thread
                logger.warning("could not renew the lock %s: %s", self.path, error)

    def release(self) -> None:
        """Gives the lock up (idempotent; a lock taken over by another run is left to it)."""
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join()
            self._renewer = None
        _HELD.pop(self.path, None)
        try:
            if self._is_ours(self._holder()):
                with storage.reported(self.path):
                    self.path.unlink(missing_ok=True)
        except StorageError as error:  # the store is gone: the lease expires by itself
            logger.warning(
                "could not release %s (%s); its lease expires by itself", self.path, error
            )


def _release_all() -> None:
    """A run that failed before its loop started still leaves no lock behind."""
    for lock in list(_HELD.values()):
        lock.release()
