"""One writer per MODEL_DIR when the MODEL_DIR is a bucket: the lease object on a real S3 server."""

from __future__ import annotations

import json
import logging

import pytest

from t5forge import storage
from t5forge.errors import ConfigError
from t5forge.run.model_dir_lock import LOCK_FILE, ModelDirLock


def _elsewhere(lock: ModelDirLock) -> ModelDirLock:
    """The same lock as a run on another host would hold it (its pid cannot be checked here)."""
    lock._record = {**lock._record, "host": "other-host", "pid": 4242}
    return lock


def test_a_second_run_is_refused_and_an_expired_lease_is_taken_over(bucket, caplog):
    model_dir = f"{bucket}/runs/en_de"
    first = _elsewhere(ModelDirLock(model_dir, lease_seconds=600))
    first.acquire()
    try:
        lease = json.loads(storage.path(f"{model_dir}/{LOCK_FILE}").read_text())
        assert lease["host"] == "other-host" and lease["expires"] > 0
        with pytest.raises(
            ConfigError, match=r"in use by another training run \(pid 4242 on other-host"
        ):
            ModelDirLock(model_dir).acquire()
    finally:
        first._stop.set()  # stop renewing, as a host that died would

    storage.path(f"{model_dir}/{LOCK_FILE}").write_text(json.dumps({**lease, "expires": 0}))
    second = ModelDirLock(model_dir)
    with caplog.at_level(logging.WARNING, logger="t5forge"):
        second.acquire()
    assert "taking over the lock" in caplog.text and "its process is gone" in caplog.text
    assert (
        json.loads(storage.path(f"{model_dir}/{LOCK_FILE}").read_text())["pid"]
        == second._record["pid"]
    )
    second.release()
    assert not storage.path(f"{model_dir}/{LOCK_FILE}").exists()


def test_take_over_on_request_replaces_a_live_lease(bucket):
    model_dir = f"{bucket}/runs/forced"
    holder = _elsewhere(ModelDirLock(model_dir))
    holder.acquire()
    holder._stop.set()
    forced = ModelDirLock(model_dir, take_over=True)
    forced.acquire()
    assert json.loads(storage.path(f"{model_dir}/{LOCK_FILE}").read_text())["host"] != "other-host"
    forced.release()
