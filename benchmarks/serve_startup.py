"""Start-up of `t5forge serve`: how long until every shape is compiled, first start and restarts.

For each model in --models (benchmarks/serve.py's: the `make demo` model's config and T5 1.1
small, random weights, float32) with default settings (only the port, the compile-cache
directory and the log level given): one first start on an empty compile-cache directory, then
--repeats restarts on the directory it filled (the server's stored executables,
t5forge/serving/executables.py). Each start is timed from process start to /healthz's first 200
("ready") and to every shape compiled (/healthz's `compiled` equal to `of`: from then on no
request of any kind waits for a compile), with the server process's CPU-seconds up to that
moment. The CPU model and the load average come first (benchmarks/harness.py); results go to
benchmarks/results/serve_startup.json ("shared CPU" above load 0.3: not for publishing).

    python benchmarks/serve_startup.py                    # demo and T5 1.1 small, 5 restarts
    python benchmarks/serve_startup.py --quick            # demo, 1 restart, results in /tmp
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import harness  # same directory
import httpx
import serve  # same directory

STORE_WAIT_S = 600  # a first start writes its executables after its last shape compiled


def time_start(model_dir: Path, cache: Path) -> tuple[float, float, float, int]:
    """One `t5forge serve` start with default settings: (seconds until ready, seconds until
    every shape is compiled, the server's CPU-seconds by then, shapes)."""
    port = serve.free_port()
    command = [sys.executable, "-m", "t5forge", "serve", "--checkpoint", str(model_dir),
               "--compile_cache", str(cache), "--log_level", "warning", "--port", str(port)]  # fmt: skip
    started = time.perf_counter()
    process = subprocess.Popen(command, cwd=serve.ROOT)
    cpu_seconds = harness.pid_cpu_seconds(process.pid)
    url, ready = f"http://127.0.0.1:{port}", None
    try:
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"the server exited with {process.returncode}")
            with contextlib.suppress(httpx.TransportError):
                health = httpx.get(f"{url}/healthz", timeout=5)
                now = time.perf_counter() - started
                if health.status_code == 200 and ready is None:
                    ready = now
                body = health.json()
                if ready is not None and body["compiled"] == body["of"]:
                    return ready, now, cpu_seconds(), body["of"]
            time.sleep(0.2)
    finally:
        if process.poll() is None:
            _wait_for_store(cache)
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=120)


def _wait_for_store(cache: Path) -> None:
    """Until the server's executables are written (a restart finds them at once)."""
    deadline = time.monotonic() + STORE_WAIT_S
    while not any((cache / "serving").glob("*.executables")) and time.monotonic() < deadline:
        time.sleep(0.5)


def time_startups(bench, name: str, model_dir: Path, scratch: Path, restarts: int) -> None:
    """A first start on an empty compile cache, then `restarts` restarts on the one it filled;
    ready and every-shape times recorded as sides of `bench`."""
    cache = scratch / f"compile_cache_{name}_default"
    kinds = {"first start": harness.Samples(), "restart": harness.Samples()}
    ready = {kind: [] for kind in kinds}
    for start in range(1 + restarts):
        kind = "restart" if start else "first start"
        ready_s, every_s, cpu_s, shapes = time_start(model_dir, cache)
        kinds[kind].seconds.append(every_s)
        kinds[kind].cpu_seconds.append(cpu_s)
        ready[kind].append(ready_s)
        print(
            f"{name}, {kind}: ready {ready_s:.1f} s, every one of {shapes} shapes compiled "
            f"{every_s:.1f} s, {cpu_s:.1f} CPU-s",
            flush=True,
        )
    for kind, samples in kinds.items():
        if samples.seconds:
            side = f"{name}, {kind}, every shape compiled"
            bench.record(side, samples, 1.0, "starts/s", ready_s=ready[kind])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(serve.MODELS), choices=serve.MODELS)
    parser.add_argument(
        "--repeats", type=harness.repeats, default=harness.MIN_REPEATS, help="timed restarts"
    )
    parser.add_argument(
        "--quick", action="store_true", help="a check that it runs: demo, one restart, /tmp"
    )
    harness.add_arguments(parser, "serve_startup")
    args = parser.parse_args()
    if args.quick:
        args.models, args.repeats, args.settle_seconds = ["demo"], 1, 0
        if "--results" not in sys.argv[1:]:
            args.results = Path("/tmp/serve_startup.json")
    bench = harness.Benchmark.from_args("serve_startup", args)
    with tempfile.TemporaryDirectory() as scratch:
        vocab = serve.vocabulary(Path(scratch))
        for name in args.models:
            print(f"{name}: {serve.MODELS[name]}", flush=True)
            model_dir = serve.write_model(name, Path(scratch), vocab)
            time_startups(bench, name, model_dir, Path(scratch), args.repeats)
    bench.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
