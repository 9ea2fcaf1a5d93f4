"""A benchmark side in an interpreter of its own, called from the measuring process.

Peers that share one process disturb each other: with torch loaded, CTranslate2's decoding ran
1.8-2x slower than in a process of its own on this machine (OpenMP runtimes meeting in one
process), and transformers' `generate` ~25% slower beside JAX and CTranslate2. So each side
of benchmarks/decode.py lives in its own worker, built by a factory function
`module:function(**kwargs)` that returns the call to time. The measuring process sends each
call's arguments over a pipe and gets its result back; `cpu_seconds` reads the
worker's own CPU clock, so harness.time_interleaved reports each side's CPU, not the parent's.

Only the standard library is imported here: workers import what their factory needs.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import traceback
from multiprocessing.connection import Connection
from pathlib import Path

import harness

HERE = Path(__file__).resolve().parent
_RUN, _STOP = "run", "stop"


class IsolatedSide:
    """A side in its worker process: `side(**kwargs)` runs the factory's call there once."""

    def __init__(self, factory: str, **kwargs):
        self.factory = factory
        to_worker_r, to_worker_w = os.pipe()
        from_worker_r, from_worker_w = os.pipe()
        self.process = subprocess.Popen(
            [sys.executable, __file__, str(to_worker_r), str(from_worker_w)],
            pass_fds=(to_worker_r, from_worker_w),
            stdin=subprocess.DEVNULL,
        )
        os.close(to_worker_r)
        os.close(from_worker_w)
        self._send = Connection(to_worker_w, readable=False)
        self._receive = Connection(from_worker_r, writable=False)
        self._send.send((factory, kwargs))
        self._reply()  # the factory has built the side (models loaded) or raised
        self.cpu_seconds = harness.pid_cpu_seconds(self.process.pid)

    def _reply(self):
        try:
            ok, value = self._receive.recv()
        except EOFError:
            raise RuntimeError(
                f"{self.factory}: the worker process exited ({self.process.wait()})"
            ) from None
        if not ok:
            raise RuntimeError(f"{self.factory} failed in its worker:\n{value}")
        return value

    def __call__(self, **kwargs):
        self._send.send((_RUN, kwargs))
        return self._reply()

    def bind(self, **kwargs):
        """A zero-argument call for harness.time_interleaved, timed on the worker's CPU clock."""

        def run():
            return self(**kwargs)

        run.cpu_seconds = self.cpu_seconds
        return run

    def close(self) -> None:
        self._send.send(_STOP)
        self.process.wait(timeout=60)
        self._send.close()
        self._receive.close()


def run_sides(bench, sides: dict, steps: int, **options) -> dict:
    """`bench.run` over isolated sides (name -> IsolatedSide), each worker stopped afterwards
    whatever happens; returns the sides' last outputs."""
    try:
        return bench.run({name: side.bind() for name, side in sides.items()}, steps, **options)
    finally:
        for side in sides.values():
            side.close()


def _serve(receive: Connection, send: Connection) -> None:
    """The worker: build the side, then run it once per request until told to stop."""
    factory, kwargs = receive.recv()
    try:
        module, _, function = factory.partition(":")
        call = getattr(importlib.import_module(module), function)(**kwargs)
    except Exception:  # reported to the measuring process, which raises it
        send.send((False, traceback.format_exc()))
        return
    send.send((True, None))
    while (request := receive.recv()) != _STOP:
        _, kwargs = request
        try:
            send.send((True, call(**kwargs)))
        except Exception:
            send.send((False, traceback.format_exc()))


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    _serve(
        Connection(int(sys.argv[1]), writable=False), Connection(int(sys.argv[2]), readable=False)
    )
