"""Resumable outputs know who wrote them: an `infer` killed mid-run and rerun with another
checkpoint, batch size, lengths, decode length or data is refused in one line (not appended to
the first run's rows); a second `infer` into a directory in use is refused; `eval` rerun into
its directory replaces a step's rows instead of repeating them and refuses another evaluation;
`train` refuses to resume on changed data files."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
from commands import REPO, TASK

from .conftest import error_line

OUTPUT = f"{TASK}-predict.jsonl"
PROGRESS = f".{TASK}-predict.progress.json"
# The real command, dying without any handler (as SIGKILL) right after its first chunk is
# recorded: the output holds one chunk and its marker.
DIE_AFTER_FIRST_CHUNK = """
import importlib, os, sys
infer = importlib.import_module("t5forge.run.infer")  # the module: t5forge.run.infer is also a function
real_flush = infer._flush
def flush_then_die(*args, **kwargs):
    real_flush(*args, **kwargs)
    os._exit(137)
infer._flush = flush_then_die
from t5forge.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


def _infer_args(faults, checkpoint, output, *extra):
    return [
        "infer",
        f"--gin_file={faults.gin}",
        "--gin_file=runs/infer.gin",
        "--gin.DROPOUT_RATE=0.0",
        f"--gin.CHECKPOINT_PATH={checkpoint}",
        f"--gin.INFER_OUTPUT_DIR={output}",
        f"--gin.MIXTURE_OR_TASK_NAME={TASK}",
        "--gin.TASK_FEATURE_LENGTHS={'inputs': 32, 'targets': 8}",
        "--gin.BATCH_SIZE=16",
        "--gin.infer.checkpoint_period=1",
        *extra,
    ]


@pytest.fixture(scope="module")
def killed(faults, trained, tmp_path_factory):
    """An infer output dir holding the first chunk of a killed run and its marker."""
    output = tmp_path_factory.mktemp("killed") / "out"
    result = faults.run_python(
        DIE_AFTER_FIRST_CHUNK, *_infer_args(faults, trained / "checkpoint_12", output)
    )
    assert result.returncode == 137, result.stderr[-2000:]
    assert (output / PROGRESS).is_file() and (output / OUTPUT).is_file()
    return output


@pytest.fixture
def killed_copy(killed, tmp_path):
    return shutil.copytree(killed, tmp_path / "out")


@pytest.fixture
def changed_data(tmp_path):
    """A T5FORGE_DATA_DIR whose en_de_lohelp validation split lost its last row."""
    folder = tmp_path / "data" / "en_de_lohelp"
    shutil.copytree(REPO / "t5forge/tasks/data/en_de_lohelp", folder)
    for split in ("train", "validation"):
        rows = gzip.decompress((folder / f"{split}.jsonl.gz").read_bytes()).splitlines(True)
        (folder / f"{split}.jsonl.gz").write_bytes(gzip.compress(b"".join(rows[:-1])))
    return folder.parent


RERUNS = {  # what the rerun changes -> (its extra flags, checkpoint, what the line names)
    "another checkpoint": ([], "checkpoint_10", "checkpoint"),
    "another batch size": (["--gin.BATCH_SIZE=8"], "checkpoint_12", "batch_size: 16 -> 8"),
    "other lengths": (
        ["--gin.TASK_FEATURE_LENGTHS={'inputs': 16, 'targets': 8}"],
        "checkpoint_12",
        "task_feature_lengths",
    ),
    "another decode length": (
        ["--gin.infer.max_decode_length=4"],
        "checkpoint_12",
        "max_decode_length",
    ),
    "changed data": ([], "checkpoint_12", "data file validation.jsonl.gz changed"),
}


@pytest.mark.parametrize("change", sorted(RERUNS))
def test_infer_rerun_with_other_settings_is_refused(
    faults, trained, killed_copy, changed_data, change
):
    flags, checkpoint, named = RERUNS[change]
    before = {name: (killed_copy / name).read_bytes() for name in (OUTPUT, PROGRESS)}
    env = faults.env(T5FORGE_DATA_DIR=changed_data) if change == "changed data" else None
    result = faults.run(*_infer_args(faults, trained / checkpoint, killed_copy, *flags), env=env)
    line = error_line(result)
    assert "was written by another run" in line and named in line, line
    assert "INFER_OUTPUT_DIR" in line
    assert {name: (killed_copy / name).read_bytes() for name in (OUTPUT, PROGRESS)} == before
    assert not (killed_copy / "infer.lock").exists()  # the dead run's lock, taken over, released


def test_infer_rerun_with_the_same_settings_finishes_every_row_once(faults, trained, killed_copy):
    rerun = faults.run(*_infer_args(faults, trained / "checkpoint_12", killed_copy))
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    rows = [json.loads(line) for line in (killed_copy / OUTPUT).read_text().splitlines()]
    assert len(rows) == 400 and not (killed_copy / PROGRESS).exists()
    assert not (killed_copy / "infer.lock").exists()


def test_an_unreadable_marker_is_one_line(faults, trained, killed_copy):
    (killed_copy / PROGRESS).write_text('{"batches": 3, "by')
    result = faults.run(*_infer_args(faults, trained / "checkpoint_12", killed_copy))
    assert f"{PROGRESS} is unreadable" in error_line(result)


@pytest.fixture
def live_holder():
    """A live process of this host that a lock file can name."""
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    yield process.pid
    process.kill()
    process.wait()


def test_infer_into_a_directory_in_use_is_refused(faults, trained, killed_copy, live_holder):
    record = {"host": os.uname().nodename, "pid": live_holder, "started": "now", "expires": 1e12}
    (killed_copy / "infer.lock").write_text(json.dumps(record))
    before = (killed_copy / OUTPUT).read_bytes()
    result = faults.run(*_infer_args(faults, trained / "checkpoint_12", killed_copy))
    line = error_line(result)
    assert f"in use by another infer (pid {live_holder}" in line, line
    assert (killed_copy / OUTPUT).read_bytes() == before


@pytest.mark.slow
def test_two_infers_started_into_one_directory(faults, trained, tmp_path):
    output = tmp_path / "out"
    slow = ["--gin.BATCH_SIZE=1"]  # 400 chunks, each flushed
    first = faults.popen(*_infer_args(faults, trained / "checkpoint_12", output, *slow))
    while not (output / "infer.lock").exists():
        assert first.poll() is None, first.stderr.read()[-2000:]
        time.sleep(0.01)
    # Held still while the second runs: however fast its compiled programs load, the first
    # cannot finish (and release the lock) before the second has started.
    first.send_signal(signal.SIGSTOP)
    try:
        second = faults.run(*_infer_args(faults, trained / "checkpoint_12", output, *slow))
    finally:
        first.send_signal(signal.SIGCONT)
    assert "in use by another infer" in error_line(second)
    assert first.wait() == 0
    assert len((output / OUTPUT).read_text().splitlines()) == 400


def _eval_args(faults, checkpoint, output, *extra):
    return [
        "eval",
        f"--gin_file={faults.gin}",
        "--gin_file=runs/eval.gin",
        "--gin.DROPOUT_RATE=0.0",
        f"--gin.CHECKPOINT_PATH={checkpoint}",
        f"--gin.EVAL_OUTPUT_DIR={output}",
        f"--gin.MIXTURE_OR_TASK_NAME={TASK}",
        "--gin.TASK_FEATURE_LENGTHS={'inputs': 32, 'targets': 8}",
        *extra,
    ]


def _metric_steps(output) -> dict[str, list[int]]:
    return {
        path.name: [json.loads(line)["step"] for line in path.read_text().splitlines()]
        for path in sorted(output.glob("*metrics.jsonl"))
    }


@pytest.fixture(scope="module")
def evaluated(faults, trained, tmp_path_factory):
    """checkpoint_12 evaluated, then checkpoint_12 again into the same directory."""
    output = tmp_path_factory.mktemp("eval") / "out"
    for _ in range(2):
        faults.run(*_eval_args(faults, trained / "checkpoint_12", output), check=True)
    return output


def test_eval_rerun_replaces_its_rows(evaluated):
    assert _metric_steps(evaluated) == {
        f"{TASK}-metrics.jsonl": [12],
        "metrics.jsonl": [12],
    }


EVAL_CHANGES = {
    "another run": (lambda trained, copy: copy / "checkpoint_12", [], "run:"),
    "other lengths": (
        lambda trained, copy: trained / "checkpoint_12",
        ["--gin.TASK_FEATURE_LENGTHS={'inputs': 16, 'targets': 8}"],
        "task_feature_lengths",
    ),
    "another decode length": (
        lambda trained, copy: trained / "checkpoint_12",
        ["--gin.evaluate.max_decode_length=4"],
        "max_decode_length",
    ),
}


@pytest.mark.parametrize("change", sorted(EVAL_CHANGES))
def test_another_evaluation_into_the_directory_is_refused(
    faults, trained, run_copy, evaluated, tmp_path, change
):
    checkpoint, flags, named = EVAL_CHANGES[change]
    output = shutil.copytree(evaluated, tmp_path / "eval")
    result = faults.run(*_eval_args(faults, checkpoint(trained, run_copy), output, *flags))
    line = error_line(result)
    assert f"EVAL_OUTPUT_DIR {output} was written by another run" in line and named in line
    assert _metric_steps(output) == _metric_steps(evaluated)


def test_train_resume_on_changed_data_is_refused(faults, run_copy, changed_data):
    before = sorted(p.name for p in run_copy.iterdir())
    result = faults.train(run_copy, 14, env=faults.env(T5FORGE_DATA_DIR=changed_data))
    line = error_line(result)
    assert "was trained on other data (data file train.jsonl.gz changed" in line, line
    assert "INITIAL_CHECKPOINT_PATH" in line
    assert sorted(p.name for p in run_copy.iterdir()) == before
