"""A full disk and a read-only file system, for real: size-limited tmpfs mounts.

Mounting needs root (CI runs these as root, on a fresh machine of the same kind). Elsewhere the
cases skip, saying so: TensorStore writes from C++, so no Python-level fault injection could
reach the writes that matter.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from .conftest import TASK, checkpoint_steps, error_line, losses

MB = 1 << 20


class Mounts:
    """tmpfs file systems made for one test and unmounted after it."""

    def __init__(self, root):
        self.root, self.mounted = root, []

    def tmpfs(self, name: str, size: int, readonly: bool = False):
        if os.geteuid() != 0:
            pytest.skip("a real full or read-only file system needs root to mount a tmpfs")
        point = self.root / name
        point.mkdir()
        options = f"size={size}" + (",ro" if readonly else "")
        result = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(point)],
            capture_output=True,
            text=True,
        )
        if result.returncode:
            pytest.skip(f"cannot mount a tmpfs here: {result.stderr.strip()}")
        self.mounted.append(point)
        return point

    def remount(self, point, options: str):
        subprocess.run(["mount", "-o", f"remount,{options}", str(point)], check=True)


@pytest.fixture
def mounts(tmp_path):
    made = Mounts(tmp_path)
    yield made
    for point in reversed(made.mounted):
        subprocess.run(["umount", "-l", str(point)], check=False)


def _usage(directory) -> int:
    return sum(p.stat().st_size for p in directory.rglob("*") if p.is_file())


def _copy_onto(run, point):
    return shutil.copytree(run, point / "run", symlinks=True)


@pytest.mark.slow
def test_disk_full_is_one_line_keeps_checkpoints_and_resumes_after_freeing(faults, trained, mounts):
    disk = mounts.tmpfs("disk", 8 * MB)
    model_dir = _copy_onto(trained, disk)
    mounts.remount(disk, f"size={_usage(model_dir) + int(1.8 * MB)}")
    result = faults.train(model_dir, 40)
    assert result.returncode == 2, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "No space left on device" in errors[0], result.stderr[-3000:]
    kept = checkpoint_steps(model_dir)
    assert f"the last good checkpoint is {model_dir / f'checkpoint_{kept[-1]}'}." in errors[0]
    assert kept[:3] == [5, 10, 12]
    for step in kept:
        assert faults.run("checkpoint", "verify", model_dir / f"checkpoint_{step}").returncode == 0
    mounts.remount(disk, f"size={64 * MB}")
    rerun = faults.train(model_dir, 20)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert checkpoint_steps(model_dir)[-1] == 20
    assert {s: v for s, v in losses(model_dir).items() if s <= 12} == losses(trained)


@pytest.mark.slow
def test_disk_full_prints_no_traceback(faults, trained, mounts):
    disk = mounts.tmpfs("disk", 8 * MB)
    model_dir = _copy_onto(trained, disk)
    mounts.remount(disk, f"size={_usage(model_dir) + int(1.8 * MB)}")
    error_line(faults.train(model_dir, 40))


@pytest.mark.slow
def test_low_free_space_warns_at_start(faults, trained, mounts):
    disk = mounts.tmpfs("disk", 8 * MB)
    model_dir = _copy_onto(trained, disk)
    mounts.remount(disk, f"size={_usage(model_dir) + MB}")
    result = faults.train(model_dir, 12)  # already finished: nothing to write but the warning
    assert result.returncode == 0, result.stderr[-2000:]
    assert "less than two checkpoints" in result.stderr


def test_read_only_new_model_dir_is_one_line(faults, mounts):
    disk = mounts.tmpfs("readonly", MB, readonly=True)
    line = error_line(faults.train(disk / "run", 5))
    assert "Read-only file system" in line and str(disk) in line


def test_read_only_existing_run_is_one_line(faults, trained, mounts):
    disk = mounts.tmpfs("disk", 8 * MB)
    model_dir = _copy_onto(trained, disk)
    mounts.remount(disk, "ro")
    line = error_line(faults.train(model_dir, 15))
    assert "Read-only file system" in line
    assert checkpoint_steps(model_dir) == [5, 10, 12]


@pytest.mark.parametrize(
    "command, output_binding", [("infer", "INFER_OUTPUT_DIR"), ("eval", "EVAL_OUTPUT_DIR")]
)
def test_read_only_output_dir_is_one_line(faults, trained, mounts, command, output_binding):
    disk = mounts.tmpfs("readonly", MB, readonly=True)
    result = faults.run(
        command,
        f"--gin_file={faults.gin}",
        f"--gin_file=runs/{command}.gin",
        "--gin.DROPOUT_RATE=0.0",
        f"--gin.CHECKPOINT_PATH={trained / 'checkpoint_12'}",
        f"--gin.{output_binding}={disk / 'out'}",
        f"--gin.MIXTURE_OR_TASK_NAME={TASK}",
        "--gin.TASK_FEATURE_LENGTHS={'inputs': 32, 'targets': 8}",
    )
    assert "Read-only file system" in error_line(result)


def test_convert_into_a_full_disk_is_one_line(faults, trained, mounts):
    disk = mounts.tmpfs("tiny", 64 * 1024)
    result = faults.run(
        "convert",
        "--from",
        "t5forge",
        "--to",
        "hf",
        "--input",
        trained / "checkpoint_12",
        "--output",
        disk / "hf",
    )
    assert "No space left on device" in error_line(result)
