"""Signals (SIGTERM, Ctrl-C, SIGKILL inside a save) and a diverging run: what is saved, the
exit status a scheduler sees, and a rerun that resumes without repeating metrics rows."""

from __future__ import annotations

import signal
import subprocess
import time
from collections import Counter

import pytest

from .conftest import checkpoint_steps, error_line, losses, metric_rows

pytestmark = pytest.mark.slow
ASYNC = "--gin.utils.SaveCheckpointConfig.async_save=True"


def _wait_for_rows(model_dir, rows, process, timeout=600):
    deadline = time.time() + timeout
    metrics = model_dir / "metrics.jsonl"
    while time.time() < deadline and process.poll() is None:
        if metrics.exists() and len(metrics.read_text().splitlines()) >= rows:
            return
        time.sleep(0.05)
    raise AssertionError(f"{metrics} never reached {rows} rows")


@pytest.mark.parametrize("signum, status", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_signal_saves_exits_distinctly_and_resumes(faults, tmp_path, signum, status):
    model_dir = tmp_path / "run"
    process = faults.popen(*faults.train_args(model_dir, 100000, ASYNC, period=100000))
    _wait_for_rows(model_dir, 3, process)
    process.send_signal(signum)
    _, stderr = process.communicate(timeout=300)
    assert process.returncode == status, stderr[-2000:]
    assert "Traceback" not in stderr and "rerun the same command to resume" in stderr
    saved = checkpoint_steps(model_dir)
    assert len(saved) == 1 and saved[0] == max(losses(model_dir)) >= 3
    assert faults.run("checkpoint", "verify", model_dir).returncode == 0  # sealed async save
    resumed = faults.train(model_dir, saved[0] + 2, ASYNC, period=100000)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert f"(step {saved[0]})" in resumed.stderr
    counts = Counter(metric_rows(model_dir))
    assert max(counts.values()) == 1, counts  # no row of the first attempt repeated


def test_sigkill_during_saves_then_rerun_matches_an_uninterrupted_run(faults, trained, tmp_path):
    model_dir = tmp_path / "run"
    process = faults.popen(*faults.train_args(model_dir, 12, ASYNC, period=1))
    _wait_for_rows(model_dir, 4, process)
    process.send_signal(signal.SIGKILL)  # every step saves, so the kill lands in or near one
    process.wait()
    rerun = faults.train(model_dir, 12, ASYNC, period=1)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert "taking over the lock" in rerun.stderr  # the killed run could not release it
    assert losses(model_dir) == losses(trained)
    assert max(Counter(metric_rows(model_dir)).values()) == 1


def test_second_ctrl_c_interrupts_at_once(faults, tmp_path):
    model_dir = tmp_path / "run"
    process = faults.popen(*faults.train_args(model_dir, 100000, period=100000))
    _wait_for_rows(model_dir, 2, process)
    process.send_signal(signal.SIGINT)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=300)
    assert process.returncode == 130, stderr[-2000:]


HUGE_LR = ["--gin.utils.create_learning_rate_scheduler.base_learning_rate=1e9"]


def test_divergence_keeps_the_last_state_whose_own_loss_was_finite(faults, run_copy):
    """The step before the NaN one applied a huge update: its output is finite but diverged.
    The state kept is that step's input, and the advised rerun with a sane rate finishes."""
    result = faults.train(run_copy, 30, *HUGE_LR)
    line = error_line(result)
    assert "non-finite loss, parameter or optimizer value" in line and "last good state" in line
    bad_step = int(line.split("step ")[1].split()[0])
    kept = bad_step - 2
    assert f"the state of step {kept}, the last whose own loss was finite" in line, line
    assert kept >= 12 and checkpoint_steps(run_copy)[-1] == kept
    verify = faults.run("checkpoint", "verify", run_copy / f"checkpoint_{kept}")
    assert verify.returncode == 0 and "all finite" in verify.stdout, verify.stderr[-2000:]
    rerun = faults.train(run_copy, bad_step + 2)
    assert f"resumed from {run_copy / f'checkpoint_{kept}'}" in rerun.stderr
    assert rerun.returncode == 0, rerun.stderr[-2000:]


def test_divergence_from_scratch_keeps_the_initial_state(faults, tmp_path):
    """lr 1e9 from step 0: step 1 applies a huge update and step 2's loss is NaN; the state
    kept is step 0's (its own loss was finite), not step 1's, so a sane rerun trains."""
    result = faults.train(tmp_path / "run", 6, *HUGE_LR)
    line = error_line(result)
    assert "step 2 gave a non-finite loss" in line and "the state of step 0" in line, line
    assert checkpoint_steps(tmp_path / "run") == [0]
    rerun = faults.train(tmp_path / "run", 3)
    assert rerun.returncode == 0 and "resumed from" in rerun.stderr, rerun.stderr[-2000:]
    assert checkpoint_steps(tmp_path / "run")[-1] == 3


def test_skipping_bad_steps_is_bounded(faults, run_copy):
    result = faults.train(run_copy, 30, *HUGE_LR, "--gin.train.max_skipped_nonfinite_steps=2")
    assert result.stderr.count("its batch is skipped") == 2
    assert "after 2 skipped" in error_line(result)


def test_resuming_with_another_optimizer_is_refused_and_nothing_moved_aside(faults, run_copy):
    line = error_line(faults.train(run_copy, 15, "--gin.train.optimizer=@optimizers.adamw"))
    assert "does not fit this run's train state" in line and "checkpoint_12" in line
    assert not list(run_copy.glob("*.corrupt"))


def test_negative_skip_bound_is_refused(faults, tmp_path):
    line = error_line(
        faults.train(tmp_path / "run", 5, "--gin.train.max_skipped_nonfinite_steps=-1")
    )
    assert "max_skipped_nonfinite_steps" in line


def test_sigterm_before_training_starts_leaves_no_lock(faults, tmp_path):
    model_dir = tmp_path / "run"
    process = faults.popen(*faults.train_args(model_dir, 5))
    deadline = time.time() + 300
    while not (model_dir / "train.lock").exists() and time.time() < deadline:
        assert process.poll() is None, "the run ended before taking its lock"
        time.sleep(0.02)
    process.send_signal(signal.SIGTERM)
    try:
        process.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        process.kill()
        raise
    assert process.returncode in (143, -signal.SIGTERM)
    rerun = faults.train(model_dir, 5)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
