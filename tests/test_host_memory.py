"""The host allocator keeps XLA:CPU's freed temporaries, so a step does not fault them in again."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest
from commands import command_env, python

from t5forge import host_memory

REPO_ROOT = Path(__file__).resolve().parents[1]
RUNS = 20

# A program whose 128 MB temporary XLA:CPU allocates and frees at every execution; prints the
# minor page faults of each execution after the first, and the temporary's size.
REPEATED_STEPS = textwrap.dedent(f"""
    import resource
    import t5forge  # before jax's threads start, as a run imports it
    import jax, jax.numpy as jnp

    @jax.jit
    def step(x):
        y = jnp.sin(x)[::-1] + 1
        return (jnp.cos(y)[:, ::-1] * y).sum()

    x = jnp.ones((4096, 4096))
    step(x).block_until_ready()
    print(step.lower(x).compile().memory_analysis().temp_size_in_bytes)
    for _ in range({RUNS}):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        step(x).block_until_ready()
        print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
""")


def _faults_per_run_in_temporaries(setting: str) -> float:
    """How many times over the runs faulted in a temporary's worth of fresh pages, per run."""
    env = command_env(PYTHONPATH=REPO_ROOT, **{host_memory.ENV: setting})
    result = python("-c", REPEATED_STEPS, env=env, timeout=300, check=True)
    temp_bytes, *faults = map(int, result.stdout.split())
    assert temp_bytes >= 100 * 2**20, "the program must have a large temporary to measure"
    return sum(faults) * os.sysconf("SC_PAGE_SIZE") / temp_bytes / RUNS


@pytest.mark.skipif(not host_memory.on_glibc(), reason="the setting is glibc's malloc's")
def test_a_repeated_step_reuses_its_temporaries_instead_of_faulting_them_in():
    assert _faults_per_run_in_temporaries("system") > 0.9  # glibc's default maps it afresh
    # Kept: at most the odd execution that starts before the last one's free lands.
    assert _faults_per_run_in_temporaries("keep") < 0.5
