"""Damaged checkpoints: detected by the checksums recorded at save, skipped with a warning that
names the file, moved aside, and never a traceback in `checkpoint verify`, `convert`,
`t5forge.load`, `eval` or a resumed `train`."""

from __future__ import annotations

import json
import shutil

import pytest
from commands import TASK

from .conftest import checkpoint_steps, error_line, largest_file


def _flip(path, count=64):
    data = bytearray(path.read_bytes())
    start = len(data) // 2
    for i in range(start, min(start + count, len(data))):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))


def _truncate(path):
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


CORRUPTIONS = {
    "64 bytes flipped in the largest data file": lambda ckpt: _flip(largest_file(ckpt / "state")),
    "one bit flipped in the largest data file": lambda ckpt: _flip(largest_file(ckpt / "state"), 1),
    "largest data file truncated": lambda ckpt: _truncate(largest_file(ckpt / "state")),
    "largest data file deleted": lambda ckpt: largest_file(ckpt / "state").unlink(),
    "state/_METADATA deleted": lambda ckpt: (ckpt / "state" / "_METADATA").unlink(),
    "state/_METADATA overwritten": lambda ckpt: (ckpt / "state" / "_METADATA").write_text("{]"),
    "data position overwritten": lambda ckpt: largest_file(ckpt / "dataset").write_text("garbage"),
    "checksums.json overwritten": lambda ckpt: (ckpt / "checksums.json").write_text("not json"),
}


@pytest.mark.parametrize("damage", sorted(CORRUPTIONS))
def test_verify_names_the_damage(faults, run_copy, damage):
    CORRUPTIONS[damage](run_copy / "checkpoint_12")
    line = error_line(faults.run("checkpoint", "verify", run_copy / "checkpoint_12"))
    assert "checkpoint_12" in line, line


def test_verify_passes_an_intact_checkpoint(faults, trained):
    result = faults.run("checkpoint", "verify", trained / "checkpoint_12")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "ok" in result.stdout and "match their checksums" in result.stdout


def test_verify_of_a_model_dir_checks_its_latest_checkpoint(faults, trained):
    result = faults.run("checkpoint", "verify", trained)
    assert result.returncode == 0 and "checkpoint_12" in result.stdout


def test_verify_of_a_directory_without_checkpoints(faults, tmp_path):
    assert "no t5forge checkpoint" in error_line(faults.run("checkpoint", "verify", tmp_path))


@pytest.mark.parametrize(
    "damage",
    [
        "64 bytes flipped in the largest data file",
        "largest data file truncated",
        "state/_METADATA deleted",
    ],
)
def test_convert_refuses_a_damaged_checkpoint_in_one_line(faults, run_copy, tmp_path, damage):
    CORRUPTIONS[damage](run_copy / "checkpoint_12")
    result = faults.run(
        "convert",
        "--from",
        "t5forge",
        "--to",
        "hf",
        "--input",
        run_copy / "checkpoint_12",
        "--output",
        tmp_path / "hf",
    )
    assert "checkpoint_12" in error_line(result)


@pytest.mark.parametrize(
    "damage", ["64 bytes flipped in the largest data file", "state/_METADATA deleted"]
)
def test_load_raises_one_checkpoint_error(faults, run_copy, damage):
    CORRUPTIONS[damage](run_copy / "checkpoint_12")
    script = (
        "import sys, t5forge\n"
        "try:\n    t5forge.load(sys.argv[1])\n"
        "except t5forge.errors.CheckpointError as e:\n    print('CheckpointError:', e)\n"
    )
    result = faults.run_python(script, run_copy / "checkpoint_12")
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.startswith("CheckpointError:") and "checkpoint_12" in result.stdout


@pytest.mark.slow
@pytest.mark.parametrize(
    "damage",
    [
        "64 bytes flipped in the largest data file",
        "state/_METADATA deleted",
        "largest data file truncated",
    ],
)
def test_resume_skips_the_damaged_checkpoint_and_finishes(faults, run_copy, damage):
    CORRUPTIONS[damage](run_copy / "checkpoint_12")
    result = faults.train(run_copy, 15)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "skipping unreadable checkpoint" in result.stderr and "checkpoint_12" in result.stderr
    assert "resumed from" in result.stderr and "(step 10)" in result.stderr
    assert (run_copy / "checkpoint_12.corrupt").is_dir()
    assert checkpoint_steps(run_copy) == [5, 10, 15]
    assert faults.run("checkpoint", "verify", run_copy / "checkpoint_15").returncode == 0


@pytest.mark.slow
def test_every_checkpoint_damaged_is_one_line(faults, run_copy):
    for step in (5, 10, 12):
        CORRUPTIONS["state/_METADATA deleted"](run_copy / f"checkpoint_{step}")
    assert "no readable checkpoint" in error_line(faults.train(run_copy, 15))


@pytest.mark.slow
def test_eval_all_skips_a_damaged_checkpoint_and_evaluates_the_rest(faults, run_copy, tmp_path):
    shutil.rmtree(run_copy / "checkpoint_5")
    CORRUPTIONS["64 bytes flipped in the largest data file"](run_copy / "checkpoint_10")
    result = faults.run(
        "eval",
        f"--gin_file={faults.gin}",
        "--gin_file=runs/eval.gin",
        "--gin.DROPOUT_RATE=0.0",
        f"--gin.CHECKPOINT_PATH={run_copy}",
        "--gin.utils.RestoreCheckpointConfig.mode='all'",
        f"--gin.EVAL_OUTPUT_DIR={tmp_path / 'eval'}",
        f"--gin.MIXTURE_OR_TASK_NAME={TASK}",
        "--gin.TASK_FEATURE_LENGTHS={'inputs': 32, 'targets': 8}",
        "--gin.BATCH_SIZE=400",
        "--gin.evaluate.max_decode_length=2",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "warning: skipping" in result.stderr and "checkpoint_10" in result.stderr
    steps = [
        json.loads(line)["step"] for line in result.stdout.splitlines() if line.startswith("{")
    ]
    assert steps == [12]


# Damage done after checksums.json was deleted: only what makes the arrays unreadable can be
# found without it (a flipped bit inside a value reads back as another value; hence checksums).
# Every data file is damaged, as an interrupted copy or a sync of the metadata alone leaves
# them: which file holds the parameters depends on how Orbax batched its writes, and `load`
# reads the parameters only (a damaged file of optimizer state is no error of load's).
WITHOUT_CHECKSUMS = {
    "every data file cut to 1 KB": lambda path: path.write_bytes(path.read_bytes()[:1024]),
    "every data file deleted": lambda path: path.unlink(),
}


def _without_checksums(damage):
    def spoil(ckpt):
        (ckpt / "checksums.json").unlink()
        for data_file in (ckpt / "state").glob("**/d/*"):
            WITHOUT_CHECKSUMS[damage](data_file)

    return spoil


@pytest.mark.parametrize("damage", sorted(WITHOUT_CHECKSUMS))
def test_load_without_checksums_raises_one_checkpoint_error(faults, run_copy, damage):
    import t5forge
    from t5forge.errors import CheckpointError

    _without_checksums(damage)(run_copy / "checkpoint_12")
    with pytest.raises(CheckpointError, match="checkpoint_12") as raised:
        t5forge.load(run_copy / "checkpoint_12")
    assert len(str(raised.value).splitlines()) == 1


@pytest.mark.slow
@pytest.mark.parametrize("damage", sorted(WITHOUT_CHECKSUMS))
def test_resume_without_checksums_moves_the_damaged_checkpoint_aside(faults, run_copy, damage):
    _without_checksums(damage)(run_copy / "checkpoint_12")
    result = faults.train(run_copy, 15)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stderr.count("Traceback") == 0, result.stderr[-3000:]
    assert "skipping unreadable checkpoint" in result.stderr and "(step 10)" in result.stderr
    assert (run_copy / "checkpoint_12.corrupt").is_dir()
    assert checkpoint_steps(run_copy) == [5, 10, 15]
