"""A full disk and a read-only file system, for real: size-limited tmpfs mounts.

Mounting needs root (CI runs these as root, on a fresh machine of the same kind). Elsewhere the
tmpfs cases skip, saying so: TensorStore writes from C++, so no Python-level fault injection
reaches the array writes. The disk-full case has a clearly labelled fallback that needs no
mount: python_enospc.py fails Python-level writes (orbax's metadata, checksums, metrics) with
ENOSPC; it runs everywhere, so CI exercises it as well as the real tmpfs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest
from commands import TASK, python

from .conftest import checkpoint_steps, error_line, losses, metric_rows

MB = 1 << 20
# What a full disk prints, naming the file the command was asked to write.
_CANNOT_WRITE = (
    "error: cannot write {}: No space left on device; free space or choose a writable "
    "directory, then rerun"
)


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


ENOSPC_FALLBACK = Path(__file__).with_name("python_enospc.py")
# What the fallback's "disk" takes of a run resumed at step 12 (Python-level bytes): its start
# (~75 kB: lock, config.gin, model-info.txt, event headers), metrics rows and checkpoint_15's
# orbax metadata (~170 kB) fit; checkpoint_20's does not. With 300 kB the save fails at
# state/_METADATA, written after the arrays; with 252 kB at array_metadatas/, written beside them.
FALLBACK_FREE_BYTES = 300_000
FALLBACK_FREE_BYTES_BESIDE_THE_ARRAYS = 252_000


def _train_on_the_fallback_full_disk(faults, model_dir, steps, free=FALLBACK_FREE_BYTES):
    return python(
        ENOSPC_FALLBACK,
        free,
        model_dir,
        *faults.train_args(model_dir, steps),
        env=faults.env(),
    )


@pytest.mark.slow
def test_disk_full_fallback_python_level_enospc_injection(faults, run_copy):
    """Fallback: Python-level ENOSPC injection, the stand-in where a tmpfs cannot be mounted
    (run everywhere, CI included). The save of checkpoint 20 fails writing orbax's metadata: one
    error line naming the last good checkpoint, every earlier one verifies, and once the disk
    has room again the rerun resumes from it without repeating a metrics row."""
    result = _train_on_the_fallback_full_disk(faults, run_copy, 40)
    assert result.returncode == 2, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "No space left on device" in errors[0], result.stderr[-3000:]
    assert "checkpoint_20" in errors[0], errors[0]
    assert f"the last good checkpoint is {run_copy / 'checkpoint_15'}." in errors[0], errors[0]
    assert checkpoint_steps(run_copy) == [5, 10, 12, 15]
    for step in (5, 10, 12, 15):
        assert faults.run("checkpoint", "verify", run_copy / f"checkpoint_{step}").returncode == 0
    rerun = faults.train(run_copy, 20)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert "(step 15)" in rerun.stderr and checkpoint_steps(run_copy) == [5, 10, 12, 15, 20]
    assert max(Counter(metric_rows(run_copy)).values()) == 1


@pytest.mark.slow
def test_disk_full_fallback_python_level_enospc_injection_prints_no_traceback(faults, run_copy):
    """Fallback: Python-level ENOSPC injection (see above), failing beside the array writes:
    TensorStore's pending writes then post to orbax's closed event loop, often before any
    storage failure reaches a hook or log, and stderr still holds the one error line and no
    traceback."""
    free = FALLBACK_FREE_BYTES_BESIDE_THE_ARRAYS
    line = error_line(_train_on_the_fallback_full_disk(faults, run_copy, 40, free))
    assert "checkpoint_20" in line and "array_metadatas" in line, line


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


def test_cache_tasks_into_a_full_disk_is_one_line_and_records_no_split(faults, mounts):
    disk = mounts.tmpfs("cache", 100 * 1024)
    result = faults.run(
        "cache-tasks", f"--tasks={TASK}", "--splits=train", f"--output_cache_dir={disk / 'c'}"
    )
    assert "No space left on device" in error_line(result)
    completed = disk / "c" / TASK / "COMPLETED"
    assert not completed.exists() or "train" not in completed.read_text()


def test_vocab_train_onto_a_full_disk_keeps_the_previous_model(faults, mounts, tmp_path):
    previous = faults.vocab.read_bytes()
    disk = mounts.tmpfs("vocab", len(previous) + 8 * 1024)
    (disk / "spiece.model").write_bytes(previous)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(f"line {i} of the corpus\n" for i in range(200)))
    result = faults.run(
        "vocab", "train", "--input", corpus, "--vocab_size", "40", "--output", disk / "spiece.model"
    )
    assert error_line(result) == _CANNOT_WRITE.format(disk / "spiece.model")
    assert (disk / "spiece.model").read_bytes() == previous
    assert sorted(p.name for p in disk.iterdir()) == ["spiece.model"]


def test_vocab_train_onto_the_fallback_full_disk_names_the_model(faults, tmp_path):
    """Fallback: Python-level ENOSPC injection (see above) under the model's folder, the first
    write failing: the line names the .model file asked for, not its hidden temporary file,
    and the previous model stays."""
    folder = tmp_path / "vocab"
    folder.mkdir()
    previous = faults.vocab.read_bytes()
    (folder / "spiece.model").write_bytes(previous)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(f"line {i} of the corpus\n" for i in range(200)))
    result = python(
        ENOSPC_FALLBACK,
        0,
        folder,
        *("vocab", "train", "--input", corpus, "--vocab_size", "40"),
        *("--output", folder / "spiece.model", "--no_progress"),
        env=faults.env(),
    )
    assert error_line(result) == _CANNOT_WRITE.format(folder / "spiece.model")
    assert (folder / "spiece.model").read_bytes() == previous
    assert sorted(p.name for p in folder.iterdir()) == ["spiece.model"]


def test_convert_to_t5forge_onto_a_full_disk_is_one_line(faults, trained, mounts):
    disk = mounts.tmpfs("convert", 400 * 1024)
    output = disk / "model"
    result = faults.run(
        "convert",
        "--from",
        "t5forge",
        "--to",
        "t5forge",
        "--input",
        trained / "checkpoint_12",
        "--output",
        output,
    )
    assert "No space left on device" in error_line(result)
    assert not (output / "checkpoint_0").exists()
