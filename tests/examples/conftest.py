"""Fixtures for the example-workflow tests: the user's environment and the CLI runner.

Each example's gin file holds its full-size configuration; a test appends `tiny_model_gin`
(tests/conftest.py; later gin files win) so the same commands run in seconds on a CPU.
"""

import pytest
from commands import command_env, t5forge


@pytest.fixture(scope="session")
def example_env(shared_data) -> dict[str, str]:
    """The environment a user's shell would have: CPU JAX, the shared datasets, no buffering."""
    return command_env(T5FORGE_DATA_DIR=shared_data)


@pytest.fixture(scope="session")
def run_t5forge(example_env):
    """Runs `t5forge ARGS...` from the repo root as a user would; fails the test on errors.

    Returns the CompletedProcess (text stdout/stderr). `env` entries are added to
    `example_env`.
    """

    def run(*args, env=None, timeout=600):
        return t5forge(*args, env={**example_env, **(env or {})}, timeout=timeout, check=True)

    return run
