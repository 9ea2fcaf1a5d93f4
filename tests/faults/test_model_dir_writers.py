"""One writer per MODEL_DIR, and a resume that refuses to continue with different data settings."""

from __future__ import annotations

import json
import os
import signal
import socket
import time
from collections import Counter

import pytest

from .conftest import checkpoint_steps, error_line, metric_rows


def _lock(model_dir, **fields):
    record = {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "started": "2026-01-01T00:00:00",
        "expires": time.time() + 600,
        **fields,
    }
    (model_dir / "train.lock").write_text(json.dumps(record))


def test_a_live_holder_refuses_a_second_run(faults, run_copy):
    _lock(run_copy)  # this test process is alive and holds it
    line = error_line(faults.train(run_copy, 15))
    assert f"pid {os.getpid()}" in line and "in use by another training run" in line
    assert not (run_copy / "checkpoint_15").exists()


def test_a_live_holder_on_another_host_refuses_until_its_lease_expires(faults, run_copy):
    _lock(run_copy, host="elsewhere", pid=1)
    assert "on elsewhere" in error_line(faults.train(run_copy, 15))


@pytest.mark.slow
@pytest.mark.parametrize(
    "holder",
    [
        {"pid": 2**22 + 7},  # a pid that is not running on this host
        {"host": "elsewhere", "pid": 1, "expires": 0},  # another host's lease ran out
        "garbage",
    ],
)
def test_a_stale_lock_is_taken_over_with_a_warning(faults, run_copy, holder):
    if holder == "garbage":
        (run_copy / "train.lock").write_text("{half a record")
    else:
        _lock(run_copy, **holder)
    result = faults.train(run_copy, 13)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "taking over the lock" in result.stderr
    assert not (run_copy / "train.lock").exists()  # released at the end


@pytest.mark.slow
def test_take_over_lock_overrides_a_live_holder(faults, run_copy):
    _lock(run_copy)
    result = faults.train(run_copy, 13, "--gin.train.take_over_lock=True")
    assert result.returncode == 0 and "taken over on request" in result.stderr


@pytest.mark.slow
def test_two_real_runs_into_one_dir(faults, tmp_path):
    model_dir = tmp_path / "run"
    first = faults.popen(*faults.train_args(model_dir, 100000, period=100000))
    deadline = time.time() + 300
    while not (model_dir / "train.lock").exists() and time.time() < deadline:
        assert first.poll() is None, "the first run ended before taking its lock"
        time.sleep(0.05)
    second = faults.train(model_dir, 10, "--gin.RANDOM_SEED=7")
    first.send_signal(signal.SIGTERM)
    first.communicate(timeout=300)
    assert f"pid {first.pid}" in error_line(second)
    assert "RANDOM_SEED = 7" not in (model_dir / "config.gin").read_text()


@pytest.mark.slow
def test_two_real_runs_with_the_same_config_into_one_dir(faults, tmp_path):
    """The same command twice (a job started twice by a scheduler): refused, nothing doubled."""
    model_dir = tmp_path / "run"
    args = faults.train_args(model_dir, 100000, period=100000)
    first = faults.popen(*args)
    deadline = time.time() + 300
    while not (model_dir / "metrics.jsonl").exists() and time.time() < deadline:
        assert first.poll() is None, "the first run ended before writing a metrics row"
        time.sleep(0.05)
    second = faults.run(*args)
    first.send_signal(signal.SIGTERM)
    first.communicate(timeout=300)
    line = error_line(second)
    assert f"pid {first.pid}" in line and "in use by another training run" in line, line
    rows = metric_rows(model_dir)
    assert max(Counter(rows).values()) == 1, Counter(rows)
    steps = [step for step, split in rows if split == "train"]
    assert steps == list(range(1, len(steps) + 1)) and checkpoint_steps(model_dir) == [steps[-1]]


@pytest.mark.parametrize(
    "change, flags, named",
    [
        ("feature lengths", {"lengths": (16, 16)}, "TASK_FEATURE_LENGTHS"),
        ("batch size", {"batch": 4}, "BATCH_SIZE"),
    ],
)
def test_resume_with_different_data_settings_is_refused(faults, run_copy, change, flags, named):
    line = error_line(faults.train(run_copy, 15, **flags))
    assert named in line and "checkpoint_12" in line and "INITIAL_CHECKPOINT_PATH" in line


def test_resume_with_a_different_vocabulary_is_refused(faults, run_copy, test_spm_path):
    line = error_line(faults.train(run_copy, 15, env=faults.env(T5FORGE_VOCAB=test_spm_path)))
    assert "vocabulary" in line and str(test_spm_path) in line
    assert (run_copy / "spiece.model").read_bytes() == faults.vocab.read_bytes()


def test_resume_with_a_different_model_is_refused(faults, run_copy):
    line = error_line(faults.train(run_copy, 15, "--gin.T5Config.emb_dim=64"))
    assert "does not match the model" in line
