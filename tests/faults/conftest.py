"""The fault-injection suite's shared set-up: the real `t5forge` command in subprocesses, one
tiny model trained once per session and copied for every case that damages it.

Every case runs the command a user runs and asserts what the user sees: the exit status, one
`error:` line without a traceback, and what is kept on disk. Compiled steps are shared through
JAX's persistent compilation cache, so only the first training run of a session compiles.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TASK = "en_de_lohelp_translate"
# The shared tiny model plus the T5 1.1 layout, as tests/cli/test_train_e2e.py trains it.
LAYOUT_GIN = """
T5Config.mlp_activations = ('gelu', 'linear')
T5Config.dropout_rate = %DROPOUT_RATE
T5Config.logits_via_embedding = False
"""
QUIET_TRAIN = [
    "--gin.EVAL_PERIOD=0",
    "--gin.train.stats_period=1",
    "--gin.train.infer_eval_dataset_cfg=None",
    "--gin.train.train_eval_dataset_cfg=None",
    "--gin.utils.SaveCheckpointConfig.async_save=False",
]


class Faults:
    """Runs commands against the session's tiny model, vocabulary and data."""

    def __init__(self, root: Path, vocab: Path):
        self.root, self.vocab = root, vocab
        self.gin = root / "tiny.gin"

    def env(self, **extra) -> dict:
        env = dict(os.environ)
        env.update(
            T5FORGE_VOCAB=str(self.vocab),
            T5FORGE_DATA_DIR=str(REPO / "t5forge/tasks/data"),
            JAX_PLATFORMS="cpu",
            PYTHONUNBUFFERED="1",
            JAX_COMPILATION_CACHE_DIR=str(self.root / "jax_cache"),
            JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
            JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0",
        )
        env.update({k: str(v) for k, v in extra.items()})
        return env

    def command(self, *args) -> list[str]:
        return [sys.executable, "-m", "t5forge", *map(str, args)]

    def run(self, *args, timeout=600, env=None, **kwargs) -> subprocess.CompletedProcess:
        return subprocess.run(
            self.command(*args),
            cwd=REPO,
            env=env or self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
            **kwargs,
        )

    def run_python(self, script: str, *args, timeout=600) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-c", script, *map(str, args)],
            cwd=REPO,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def train_args(self, model_dir, steps, *extra, period=5, batch=8, lengths=(32, 32)):
        return [
            "train",
            f"--gin_file={self.gin}",
            "--gin_file=runs/finetune.gin",
            f"--gin.MODEL_DIR={model_dir}",
            f"--gin.MIXTURE_OR_TASK_NAME={TASK}",
            f"--gin.TASK_FEATURE_LENGTHS={{'inputs': {lengths[0]}, 'targets': {lengths[1]}}}",
            f"--gin.TRAIN_STEPS={steps}",
            f"--gin.BATCH_SIZE={batch}",
            "--gin.INITIAL_CHECKPOINT_PATH=None",
            "--gin.DROPOUT_RATE=0.1",
            "--gin.utils.create_learning_rate_scheduler.base_learning_rate=0.01",
            f"--gin.CHECKPOINT_PERIOD={period}",
            *QUIET_TRAIN,
            *extra,
        ]

    def train(self, model_dir, steps, *extra, env=None, **kwargs) -> subprocess.CompletedProcess:
        return self.run(*self.train_args(model_dir, steps, *extra, **kwargs), env=env)

    def popen(self, *args, env=None) -> subprocess.Popen:
        return subprocess.Popen(
            self.command(*args),
            cwd=REPO,
            env=env or self.env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )


@pytest.fixture(scope="session")
def faults(tmp_path_factory, tiny_model_gin, tiny_vocab) -> Faults:
    root = tmp_path_factory.mktemp("faults")
    (root / "tiny.gin").write_text(tiny_model_gin.read_text() + LAYOUT_GIN)
    shutil.copy(tiny_vocab, root / "spm.model")
    return Faults(root, root / "spm.model")


@pytest.fixture(scope="session")
def trained(faults) -> Path:
    """A finished 12-step run with checkpoints 5, 10 and 12 (never modified: copy it)."""
    model_dir = faults.root / "trained"
    result = faults.train(model_dir, 12)
    assert result.returncode == 0, result.stderr[-3000:]
    return model_dir


@pytest.fixture
def run_copy(trained, tmp_path) -> Path:
    """A private copy of the trained run, for a case to damage."""
    return Path(shutil.copytree(trained, tmp_path / "run", symlinks=True))


def error_line(result: subprocess.CompletedProcess, status: int = 2) -> str:
    """The one `error:` line a refused command prints (asserting no traceback came with it)."""
    assert result.returncode == status, (result.returncode, result.stderr[-3000:])
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.stderr[-3000:]
    return errors[0]


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
