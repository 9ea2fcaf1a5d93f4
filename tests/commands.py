"""The one way tests run a t5forge command: `t5forge(...)` in a subprocess, as a user's shell runs
it, `t5forge_popen(...)` for one a test signals or races, and `t5forge_in_process(...)` through
the same entry point inside the test process. `TinyRuns` runs them against the session's tiny
model, vocabulary and the bundled en_de_lohelp slice (the `tiny_runs` fixture of conftest.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TASK = "en_de_lohelp_translate"
# What the suite's XLA:CPU compiles with (conftest.py sets it for the test processes, and the
# commands they start inherit it): LLVM at -O0. Compiling is most of a test's time on 2 cores,
# and -O0 cuts it by about 40% (tests/serving/test_compaction.py: 62 -> 35 s of compiles).
# Fast math stays off at every level, but -O0 orders some float32 sums unlike -O2, so its
# numbers are not bitwise -O2's: every comparison runs both sides under these same flags, and
# comparisons with peers (transformers, T5X's golden values) keep their tolerances.
SUITE_XLA_FLAGS = "--xla_backend_optimization_level=0"


def xla_flags(devices: int) -> str:
    """The suite's XLA flags on `devices` virtual CPU devices (for a command's own process)."""
    return f"--xla_force_host_platform_device_count={devices} {SUITE_XLA_FLAGS}"


# The shared tiny model plus the T5 1.1 layout (gated GELU, untied logits) and dropout from the
# DROPOUT_RATE macro the run commands set.
LAYOUT_GIN = """
T5Config.mlp_activations = ('gelu', 'linear')
T5Config.dropout_rate = %DROPOUT_RATE
T5Config.logits_via_embedding = False
"""
# No evaluation, a metrics row every step, saves that finish before the step goes on.
QUIET_TRAIN = [
    "--gin.EVAL_PERIOD=0",
    "--gin.train.stats_period=1",
    "--gin.train.infer_eval_dataset_cfg=None",
    "--gin.train.train_eval_dataset_cfg=None",
    "--gin.utils.SaveCheckpointConfig.async_save=False",
]


def command_env(**extra) -> dict[str, str]:
    """The environment of a user's shell (this process's): CPU JAX, unbuffered output, `extra`."""
    return {
        **os.environ,
        "JAX_PLATFORMS": "cpu",
        "PYTHONUNBUFFERED": "1",
        **{name: str(value) for name, value in extra.items()},
    }


def python(*args, env=None, timeout=600, check=False, **kwargs) -> subprocess.CompletedProcess:
    """Runs `python ARGS` with this interpreter from the repository root; text stdout and stderr
    are captured. For what needs a process of its own: a command, a script that sets JAX's
    device count, kills itself or joins another host.

    `env` is the whole environment (default `command_env()`); `check` fails the test unless the
    process exits 0.
    """
    result = subprocess.run(
        [sys.executable, *map(str, args)],
        cwd=REPO,
        env=env or command_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        **kwargs,
    )
    if check:
        assert result.returncode == 0, (
            f"python {' '.join(map(str, args))[:200]} exited {result.returncode}:\n"
            f"{result.stderr[-3000:]}"
        )
    return result


def eight_device_report(script: Path, timeout: float = 600) -> dict:
    """The JSON a multi-device check script prints last, run in its own process on 8 virtual
    CPU devices."""
    env = command_env(
        # tests/ too: check scripts import the suite's helper modules as the suite does.
        PYTHONPATH=os.pathsep.join([str(REPO), str(REPO / "tests")]),
        XLA_FLAGS=xla_flags(8),
    )
    result = python(script, env=env, timeout=timeout, check=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def python_popen(*args, env=None, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE):
    """Starts `python ARGS` from the repository root and returns the Popen (text output).

    `stdout` and `stderr` are Popen's: PIPE, DEVNULL or an open file (a log the test reads).
    """
    return subprocess.Popen(
        [sys.executable, *map(str, args)],
        cwd=REPO,
        env=env or command_env(),
        stdout=stdout,
        stderr=stderr,
        text=True,
    )


def t5forge(*args, env=None, timeout=600, check=False, **kwargs) -> subprocess.CompletedProcess:
    """Runs `t5forge ARGS` (`python -m t5forge`) as `python` does."""
    return python("-m", "t5forge", *args, env=env, timeout=timeout, check=check, **kwargs)


def t5forge_popen(*args, env=None, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE):
    """Starts `t5forge ARGS` as `python_popen` does: for a command a test signals, kills or races."""
    return python_popen("-m", "t5forge", *args, env=env, stdout=stdout, stderr=stderr)


def t5forge_in_process(*args) -> int:
    """Runs `t5forge ARGS` in this process through the command line's entry point; the status.

    Each command starts from an empty gin config, as in its own process: the previous
    command's bindings are cleared and its finalized (locked) config unlocked.
    """
    import gin

    from t5forge.cli.main import main

    with gin.unlock_config():
        gin.clear_config()
    gin.config._set_config_is_locked(False)  # gin has no public call that leaves it unlocked
    args = [str(arg) for arg in args]
    if args and args[0] in ("train", "eval", "infer") and "--help" not in args:
        # The test process keeps out of the session's compilation cache (conftest.py): the run
        # commands would otherwise point this whole process at it for every later test.
        args.append("--compile_cache=")
    return main(args)


class TinyRuns:
    """Runs commands against the session's tiny model (`gin`), vocabulary and bundled data."""

    def __init__(self, root: Path, vocab: Path):
        self.root, self.vocab = root, vocab
        self.gin = root / "tiny.gin"

    def env(self, **extra) -> dict:
        defaults = {"T5FORGE_VOCAB": self.vocab, "T5FORGE_DATA_DIR": REPO / "t5forge/tasks/data"}
        return command_env(**{**defaults, **extra})

    def run(self, *args, env=None, **kwargs) -> subprocess.CompletedProcess:
        return t5forge(*args, env=env or self.env(), **kwargs)

    def popen(self, *args, env=None, **kwargs) -> subprocess.Popen:
        return t5forge_popen(*args, env=env or self.env(), **kwargs)

    def run_python(self, script: str, *args, timeout=600) -> subprocess.CompletedProcess:
        return python("-c", script, *args, env=self.env(), timeout=timeout)

    def train_args(
        self, model_dir, steps, *extra, period=5, batch=8, lengths=(32, 32), quiet=True
    ) -> list[str]:
        """`train` of the tiny model on en_de_lohelp_translate from scratch; `extra` flags last."""
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
            *(QUIET_TRAIN if quiet else []),
            *extra,
        ]

    def train(self, model_dir, steps, *extra, env=None, check=False, timeout=600, **kwargs):
        args = self.train_args(model_dir, steps, *extra, **kwargs)
        return self.run(*args, env=env, check=check, timeout=timeout)
