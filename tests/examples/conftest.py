"""Fixtures for the example-workflow tests: the user's environment and the CLI runner.

Each example's gin file holds its full-size configuration; a test appends `tiny_model_gin`
(tests/conftest.py; later gin files win) so the same commands run in seconds on a CPU.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def example_env(shared_data) -> dict[str, str]:
    """The environment a user's shell would have: CPU JAX, the shared datasets, no buffering."""
    env = dict(os.environ)
    env.update(JAX_PLATFORMS="cpu", PYTHONUNBUFFERED="1", T5FORGE_DATA_DIR=str(shared_data))
    return env


@pytest.fixture(scope="session")
def run_t5forge(example_env):
    """Runs `t5forge ARGS...` from the repo root as a user would; fails the test on errors.

    Returns the CompletedProcess (text stdout/stderr). `env` entries are added to
    `example_env`.
    """

    def run(*args, env=None, timeout=600) -> subprocess.CompletedProcess:
        result = subprocess.run(
            [sys.executable, "-m", "t5forge", *map(str, args)],
            cwd=REPO,
            env={**example_env, **(env or {})},
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        assert result.returncode == 0, f"t5forge {args[0]} failed:\n{result.stderr[-3000:]}"
        return result

    return run
