"""`t5forge serve` re-executes itself once on mimalloc (serving/allocator.py): the same pid and
arguments, programs loaded on every core; T5FORGE_ALLOCATOR=system and other processes (a
test's, a library user's) keep glibc's malloc and load one program at a time."""

import os
import subprocess
import sys

import pytest

from t5forge.serving import allocator

# Prints its pid, asks for the re-execution, then reports: run twice when it re-executes.
PROGRAM = """
import os, sys
from t5forge.serving import allocator
if {as_command}:
    sys.argv = ["/usr/local/bin/t5forge", "serve", "--checkpoint", "runs/demo"]
print("pid", os.getpid(), flush=True)
allocator.reexec_with_mimalloc()
print("mimalloc", allocator.mimalloc_in_use(), "threads", allocator.loading_threads())
"""


def _run(as_command: bool, **environment) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", allocator.ENV)}
    result = subprocess.run(
        [sys.executable, "-c", PROGRAM.format(as_command=as_command)],
        env={**env, **environment},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return result.stdout.split("\n")[:-1]


pytestmark = pytest.mark.skipif(
    sys.platform != "linux" or allocator.mimalloc_library() is None,
    reason="mimalloc is preloaded on Linux, from the serve extra's cmeel-mimalloc",
)


def test_the_serve_command_runs_again_on_mimalloc_with_the_same_pid():
    first, second, report = _run(as_command=True)
    assert first == second  # execve: the same process, started over once
    cores = len(os.sched_getaffinity(0))
    assert report == f"mimalloc True threads {cores}"


@pytest.mark.parametrize(
    "as_command, environment",
    [(True, {allocator.ENV: "system"}), (False, {})],
    ids=["T5FORGE_ALLOCATOR=system", "not the serve command"],
)
def test_otherwise_glibc_malloc_and_one_loading_thread(as_command, environment):
    pid, report = _run(as_command, **environment)
    assert pid.startswith("pid ") and report == "mimalloc False threads 1"
