"""A MODEL_DIR on object storage (`s3://`, `gs://`): the run works in a local mirror, and each
finished checkpoint and the run's logs are copied to the bucket.

Why a mirror rather than writing the bucket directly: Orbax 0.12 builds TensorStore specs for
local paths and `gs://` only (an `s3://` path is normalised into a relative path and refused),
and object stores can neither append nor rename, which metrics.jsonl, TensorBoard and Orbax's
commit rename rely on. So a run writes exactly as into a local MODEL_DIR, and:
- a checkpoint is copied once Orbax has finalized it (when the next save starts, at the end of
  the run, and on SIGTERM/SIGINT), its files first and `checksums.json` last. A checkpoint is on
  the bucket only if its checksums are, so a copy cut off by a crash or a network error is never
  taken for complete; a SIGKILL loses at most the checkpoint not yet copied;
- the logs (metrics.jsonl, TensorBoard events, config.gin, model-info.txt, the curve PNG) go
  with every checkpoint and at the end;
- checkpoints that Orbax's keep policy deleted locally are deleted from the bucket too
  (checksums first). Checkpoints of earlier sessions that this one never fetched are left alone.
At start the newest complete checkpoint and metrics.jsonl are fetched, so a run resumes on a
fresh machine from the bucket alone. `local_copy` does the same for eval, infer and load.

The mirror lives under $T5FORGE_STAGING_DIR (default ~/.cache/t5forge/staging), one folder per URL.
"""

from __future__ import annotations

import logging
import os
import queue
import re
import shutil
import sys
import threading
from pathlib import Path

from t5forge import storage
from t5forge.checkpoints import integrity
from t5forge.checkpoints.integrity import CHECKSUMS_FILE
from t5forge.errors import CheckpointError, StorageError

logger = logging.getLogger("t5forge")

_STEP = re.compile(r"checkpoint_(\d+)")
_NOT_LOGS = re.compile(
    r"^(checkpoint_\d+|.*\.orbax-checkpoint-tmp.*|.*\.corrupt.*|train\.lock|\..*)$"
)


def complete_steps(url: str) -> list[int]:
    """Steps whose checkpoint was copied to the bucket in full (its checksums are there)."""
    storage.forget_listings(url)
    with storage.reported(url):
        found = storage.path(url).glob(f"checkpoint_*/{CHECKSUMS_FILE}")
        return sorted(
            int(match.group(1))
            for object_path in found
            if (match := _STEP.fullmatch(object_path.parent.name))
        )


def _download_tree(remote, local: Path) -> Path:
    """Copies a folder of objects into `local` (through a temporary sibling, renamed when whole,
    with checksums.json last so a half-copied checkpoint never verifies)."""
    partial = local.with_name(f".{local.name}.download")
    shutil.rmtree(partial, ignore_errors=True)
    objects = storage.files_under(remote)
    if not objects:
        raise CheckpointError(f"{remote} holds no files; check the checkpoint URL")
    objects.sort(key=lambda p: p.name == CHECKSUMS_FILE)
    for source in objects:
        target = partial / source.relative_to(remote)
        target.parent.mkdir(parents=True, exist_ok=True)
        storage.copy(source, target)
    shutil.rmtree(local, ignore_errors=True)
    partial.rename(local)
    return local


class RemoteModelDir:
    """The local mirror of one MODEL_DIR URL and the copies to and from the bucket."""

    def __init__(self, url: str):
        self.url = url.rstrip("/")
        self.remote = storage.path(self.url)
        self.local = storage.staging_folder(self.url)
        self._copied: set[int] = set()  # steps this process put on (or fetched from) the bucket
        self._pushed_logs: dict[str, tuple[int, int]] = {}
        self._queue: queue.Queue = queue.Queue()
        self._error: BaseException | None = None
        self._worker: threading.Thread | None = None

    # ---- start: fetch what the bucket has
    def pull(self) -> None:
        """Mirrors the bucket's newest complete checkpoint and metrics.jsonl; local checkpoints
        the bucket does not have (a mirror left by an earlier machine or attempt) are dropped."""
        self.local.mkdir(parents=True, exist_ok=True)
        remote_steps = complete_steps(self.url)
        for folder in self.local.glob("checkpoint_*"):
            match = _STEP.fullmatch(folder.name)
            if match is None or int(match.group(1)) not in remote_steps[-1:]:
                shutil.rmtree(folder, ignore_errors=True)
        if remote_steps:
            step = remote_steps[-1]
            local = self.local / f"checkpoint_{step}"
            if not _verified(local):
                print(f"fetching {self.url}/checkpoint_{step}", file=sys.stderr, flush=True)
                with storage.reported(self.url):
                    _download_tree(self.remote / f"checkpoint_{step}", local)
            self._copied.add(step)
        metrics = self.remote / "metrics.jsonl"
        with storage.reported(metrics):
            if metrics.exists():
                storage.copy(metrics, self.local / "metrics.jsonl")
            else:
                (self.local / "metrics.jsonl").unlink(missing_ok=True)
        self._worker = threading.Thread(target=self._work, name="t5forge-upload", daemon=True)
        self._worker.start()

    # ---- during the run: copy finished checkpoints up, in the background
    def saving(self, step: int) -> None:
        """A save of `step` started: every earlier local checkpoint is final, so copy it up.
        Raises the StorageError of an earlier copy that failed."""
        self._raise_failure()
        self._queue.put(("steps", step))

    def finish(self) -> None:
        """Copies every local checkpoint and the logs, and waits for the copies; call after the
        checkpointer finished writing."""
        self._queue.put(("steps", None))
        self._queue.put(("stop", None))
        if self._worker is not None:
            self._worker.join()
            self._worker = None
        self._raise_failure()

    def abandon(self) -> None:
        """Stops copying (after an error elsewhere); what was copied in full stays valid."""
        if self._worker is not None:
            self._queue.put(("stop", None))
            self._worker.join()
            self._worker = None

    def _raise_failure(self) -> None:
        if self._error is not None:
            latest = (
                f"checkpoint_{max(self._copied)}" if self._copied else "no complete checkpoint yet"
            )
            first = " ".join(str(self._error).split())[:300]
            raise StorageError(
                f"could not copy the run to {self.url} ({first}); the newest complete "
                f"checkpoint there is {latest}. Fix the store's access, then rerun the same "
                "command to resume"
            )

    def _work(self) -> None:
        while True:
            kind, before = self._queue.get()
            if kind == "stop":
                return
            if self._error is not None:
                continue
            try:
                self._push_steps(before)
                self._push_logs()
            except Exception as error:  # noqa: BLE001 - reported on the run's thread
                self._error = error
                logger.warning("copying the run to %s failed: %s", self.url, error)

    def _local_steps(self) -> list[int]:
        return sorted(
            int(m.group(1))
            for folder in self.local.glob("checkpoint_*")
            if (m := _STEP.fullmatch(folder.name)) and folder.is_dir()
        )

    def _push_steps(self, before: int | None) -> None:
        local_steps = self._local_steps()
        for step in local_steps:
            if step in self._copied or (before is not None and step >= before):
                continue
            self._push_step(step)
        for step in sorted(self._copied - set(local_steps)):
            if local_steps and step < local_steps[-1]:
                self._delete_step(step)

    def _push_step(self, step: int) -> None:
        folder = self.local / f"checkpoint_{step}"
        if not (folder / CHECKSUMS_FILE).is_file():
            integrity.seal(folder)
        target = self.remote / f"checkpoint_{step}"
        files = sorted(storage.files_under(folder), key=lambda p: p.name == CHECKSUMS_FILE)
        with storage.reported(target):
            for source in files:
                storage.copy(source, target / source.relative_to(folder))
        self._copied.add(step)
        logger.info("copied checkpoint_%d to %s", step, self.url)

    def _delete_step(self, step: int) -> None:
        target = self.remote / f"checkpoint_{step}"
        with storage.reported(target):
            (target / CHECKSUMS_FILE).unlink(missing_ok=True)  # no longer complete, first
            if target.exists():
                target.rmtree()
        self._copied.discard(step)

    def _push_logs(self) -> None:
        for source in storage.files_under(self.local):
            relative = source.relative_to(self.local)
            if _NOT_LOGS.match(relative.parts[0]):
                continue
            stat = source.stat()
            stamp = (stat.st_size, stat.st_mtime_ns)
            if self._pushed_logs.get(str(relative)) == stamp:
                continue
            with storage.reported(self.url):
                storage.copy(source, self.remote / str(relative))
            self._pushed_logs[str(relative)] = stamp


def _verified(local: Path) -> bool:
    if not (local / CHECKSUMS_FILE).is_file():
        return False
    try:
        integrity.verify(local)
    except CheckpointError:
        return False
    return True


def local_copy(location: str | os.PathLike) -> str:
    """A local path for a checkpoint that may be on a bucket; local paths come back unchanged.

    A run's URL gives its newest complete checkpoint, a `checkpoint_<step>` URL that one (it must
    be complete), and any other folder (a T5X or Hugging Face checkpoint) is copied whole. Copies
    are kept in the staging folder and reused while their checksums hold.
    """
    text = os.fspath(location)
    if not storage.is_url(text):
        return text
    url = text.rstrip("/")
    name = url.rsplit("/", 1)[-1]
    if _STEP.fullmatch(name):
        run, step = url.rsplit("/", 1)[0], int(_STEP.fullmatch(name).group(1))
        if step not in complete_steps(run):
            raise CheckpointError(
                f"{url} is not a complete checkpoint (no {CHECKSUMS_FILE}: its copy was cut "
                f"off or it is still being written); give an earlier checkpoint_<step> or the run"
            )
    else:
        steps = complete_steps(url)
        run, step = url, (steps[-1] if steps else None)
    if step is not None:
        local = storage.staging_folder(run) / f"checkpoint_{step}"
        if not _verified(local):
            with storage.reported(url):
                _download_tree(storage.path(run) / f"checkpoint_{step}", local)
        return str(local)
    local = storage.staging_folder(url)
    with storage.reported(url):
        if not storage.path(url).exists():
            raise CheckpointError(f"checkpoint path {url} does not exist; check the URL")
        if not local.is_dir():
            _download_tree(storage.path(url), local)
    return str(local)
