"""Factories for tests/test_bench_harness.py's isolated sides (benchmarks/isolated.py)."""

import os


def worker_pid_and_sum():
    """A side whose call reports the worker's pid and adds its arguments."""

    def run(a, b):
        return os.getpid(), a + b

    return run


def broken():
    raise ValueError("no model here")
