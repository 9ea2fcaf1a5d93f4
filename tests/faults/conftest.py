"""The fault-injection suite's shared set-up: the real `t5forge` command in subprocesses, one
tiny model trained once per session and copied for every case that damages it.

Every case runs the command a user runs and asserts what the user sees: the exit status, one
`error:` line without a traceback, and what is kept on disk. Compiled steps are shared through
the session's JAX persistent compilation cache (tests/conftest.py).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from commands import TinyRuns, t5forge_in_process


@pytest.fixture(scope="session")
def faults(tiny_runs) -> TinyRuns:
    """The session's commands on the tiny model (tests/commands.py), as every end-to-end test."""
    return tiny_runs


@pytest.fixture(scope="session")
def trained(tiny_trained) -> Path:
    """The session's finished 12-step run with checkpoints 5, 10 and 12 (copy it to damage it)."""
    return tiny_trained


@pytest.fixture
def run_copy(trained, tmp_path) -> Path:
    """A private copy of the trained run, for a case to damage."""
    return Path(shutil.copytree(trained, tmp_path / "run", symlinks=True))


def one_error(returncode: int, stderr: str, status: int = 2) -> str:
    """The one `error:` line a refused command prints (asserting no traceback came with it)."""
    assert returncode == status, (returncode, stderr[-3000:])
    assert "Traceback" not in stderr, stderr[-3000:]
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, stderr[-3000:]
    return errors[0]


def error_line(result: subprocess.CompletedProcess, status: int = 2) -> str:
    """`one_error` of a command run in a subprocess."""
    return one_error(result.returncode, result.stderr, status)


def in_process(capsys, *args) -> tuple[int, str]:
    """Runs `t5forge ARGS` in this process: its status and what it wrote to stderr."""
    status = t5forge_in_process(*args)
    return status, capsys.readouterr().err


def losses(model_dir: Path, split: str = "train") -> dict[int, float]:
    rows = [json.loads(line) for line in (model_dir / "metrics.jsonl").read_text().splitlines()]
    return {row["step"]: row["loss"] for row in rows if row["split"] == split}


def metric_rows(model_dir: Path) -> list[tuple[int, str]]:
    return [
        (row["step"], row["split"])
        for row in map(json.loads, (model_dir / "metrics.jsonl").read_text().splitlines())
    ]


def checkpoint_steps(model_dir: Path) -> list[int]:
    return sorted(
        int(p.name.split("_")[1])
        for p in model_dir.glob("checkpoint_*")
        if p.name.split("_")[1].isdigit()
    )


def largest_file(directory: Path) -> Path:
    return max((p for p in directory.rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)


# A user's task over TSV files, registered through --module_import as T5X users do.
TSV_TASK_MODULE = """
import os
from t5forge.data import metrics, preprocessors as pp
from t5forge.data import TsvSource
from t5forge.data import Feature, Task
from t5forge.data import TaskRegistry
from t5forge.data import EnvironmentSentencePieceVocabulary

vocabulary = EnvironmentSentencePieceVocabulary(extra_ids=100)
folder = os.path.dirname(__file__)
TaskRegistry.add(Task(
    "user_tsv",
    TsvSource({split: f"{folder}/{split}.tsv" for split in ("train", "validation")}),
    [pp.tokenize, pp.append_eos_after_trim],
    {"inputs": Feature(vocabulary), "targets": Feature(vocabulary)},
    metric_fns=[metrics.bleu],
))
"""
ROWS = [{"en": f"Click button {i}.", "de": f"Klicken Sie auf Knopf {i}."} for i in range(6)]
TSV_ROWS = [f"{row['en']}\t{row['de']}\n" for row in ROWS]


@pytest.fixture
def tsv_task(tmp_path, faults):
    """A module dir for --module_import (as PYTHONPATH) holding the task and its TSV files."""
    folder = tmp_path / "user_tasks"
    folder.mkdir()
    (folder / "user_tsv_tasks.py").write_text(TSV_TASK_MODULE)
    (folder / "train.tsv").write_text("".join(TSV_ROWS))
    (folder / "validation.tsv").write_text("".join(TSV_ROWS))
    return folder


def preview_tsv_train(faults: TinyRuns, tsv_task: Path) -> subprocess.CompletedProcess:
    """`t5forge tasks preview` of the `tsv_task` module's train split, in its own process."""
    return faults.run(
        "tasks",
        "preview",
        "user_tsv",
        "--module_import=user_tsv_tasks",
        "--split",
        "train",
        env=faults.env(PYTHONPATH=tsv_task),
    )
