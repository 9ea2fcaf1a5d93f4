"""`infer` killed mid-run (SIGKILL: no handler runs) and rerun: it continues after the last
finished chunk, and its output is an uninterrupted run's, every row exactly once."""

from __future__ import annotations

import signal
import time

import pytest
from commands import TASK

pytestmark = pytest.mark.slow
OUTPUT = f"{TASK}-predict.jsonl"
PROGRESS = f".{TASK}-predict.progress.json"


def _infer_args(faults, trained, output):
    """Batches of 2 flushed one at a time: 200 chunks, so a kill lands between two of them."""
    return [
        "infer",
        f"--gin_file={faults.gin}",
        "--gin_file=runs/infer.gin",
        "--gin.DROPOUT_RATE=0.0",
        f"--gin.CHECKPOINT_PATH={trained / 'checkpoint_12'}",
        f"--gin.INFER_OUTPUT_DIR={output}",
        f"--gin.MIXTURE_OR_TASK_NAME={TASK}",
        "--gin.TASK_FEATURE_LENGTHS={'inputs': 32, 'targets': 8}",
        "--gin.BATCH_SIZE=2",
        "--gin.infer.checkpoint_period=1",
    ]


@pytest.mark.parametrize("torn_write", [False, True], ids=["killed", "killed-mid-append"])
def test_infer_killed_then_rerun_writes_every_row_once(faults, trained, tmp_path, torn_write):
    whole = faults.run(*_infer_args(faults, trained, tmp_path / "whole"))
    assert whole.returncode == 0, whole.stderr[-2000:]
    expected = (tmp_path / "whole" / OUTPUT).read_text()

    output = tmp_path / "killed"
    process = faults.popen(*_infer_args(faults, trained, output))
    deadline = time.time() + 300
    while not (output / PROGRESS).exists():
        assert process.poll() is None and time.time() < deadline, "infer never flushed a chunk"
        time.sleep(0.01)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert (output / PROGRESS).exists(), "the kill came after the last chunk"
    if torn_write:  # as a kill between appending a chunk and recording it leaves the output
        with open(output / OUTPUT, "a") as f:
            f.write('{"inputs": "a row appended after the last marker", "pred')
    rerun = faults.run(*_infer_args(faults, trained, output))
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert (output / OUTPUT).read_text() == expected
    assert not (output / PROGRESS).exists()
