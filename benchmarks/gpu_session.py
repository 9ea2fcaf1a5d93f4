"""Issue 30's device session: everything a lent GPU should measure, in one prepared call.

A GPU is lent rarely, for 15 minutes in all, start-up included. This script is what such a
session runs, first thing, so no device time goes to writing commands:

    T5FORGE_BENCH_COMMIT=<commit> python3 benchmarks/gpu_session.py --out $OUT
    # then, at once, on the still-warm machine (finished phases are skipped, compiles cached):
    T5FORGE_BENCH_COMMIT=<commit> python3 benchmarks/gpu_session.py --out $OUT --resume

Phases, in the order of what matters most, each in a process of its own:
  1. device: the GPU, driver, library versions, load average; then the attention bias forms
     (benchmarks/attention_bias_forms.py): cuDNN's bias gradient against autodiff, and costs;
  2. the train step at t5forge's largest batch (MFU) and a trace of three of its steps (top
     ops, each track's op time); 3. MFU with XLA's attention, t5forge alone; 4. batch 128,
     which the H200's memory holds; 5. both sides at transformers' batch;
  6. greedy and beam 4 against transformers bf16 + SDPA (benchmarks/gpu.py);
  7. decoding profiled (benchmarks/profile_decode.py, T5 1.1 large, bf16, batch 32): fixed vs
     per-step cost, compilations during timed calls, the server's one-program-per-step decoder
     beside generate's while loop, a trace's top ops, and the decode program's optimized HLO.
The H200 lease of 2026-11-27 settled decoding (25.6x transformers greedy, 1.5 ms a step) and
measured training at 36.6% MFU (batch 80; 34.0% with remat at 160: no longer run), with 223 s
of its 430 s spent compiling the init; the lease of 2026-11-28 had the state ready in 30 s
(threefry GPU kernels: models/init_lowering.py), traced the step (products near peak,
attention and elementwise work the rest) and measured the attention bias forms.

The device image lacks grain, array_record and portpicker, which t5forge imports: carry their
Python 3.12 wheels (docs/performance.md gives the commands).

Each phase runs under what is left of --budget_s and is skipped when less than it needs is
left; a phase cut off by the budget is not marked done, so --resume runs it again. JAX's
persistent compilation cache lives in --state_dir (default .gpu_session/ in the repository,
git-ignored), which the device machine keeps between calls while it is warm: a second call
skips the compilations of the first. After every phase $OUT is rewritten with at most six
files (the device tool returns at most eight): summary.json (each phase's status, seconds and
figures), session.log (every phase's output), results.tar.gz (each phase's JSON and log),
decode_hlo.txt.gz, trace.json.gz (a generate) and train_trace.json.gz (three train steps).

--tiny runs every phase at toy sizes (T5 1.1 tiny, a few rows) on whatever jax has, so the
script stays tested on the CPU (tests/test_gpu_session.py).
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
LARGEST_FILE = 15 * 2**20  # under the device tool's 16 MiB per file returned


@dataclasses.dataclass(frozen=True)
class Sizes:
    """What the phases run: the issue's sizes, or toy ones for the CPU."""

    config: str = "t5_1_1/large"
    decode_batch: int = 32
    decode_input_length: int = 128
    short_decode: int = 8  # with new_tokens, the two lengths that give the cost per step
    new_tokens: int = 64
    input_length: int = 512
    target_length: int = 114
    transformers_batch: int = 20  # the largest that fit transformers on an 80 GB H100
    largest_batch: int = 80  # the largest that fit t5forge on an 80 GB card (XLA's analysis)
    h200_batch: int = 128  # ~95 of the H200's 105 GiB: 11.7 GiB of state + 0.65 GiB a row
    heads: int = 16  # T5 1.1 large's, for the attention bias forms


TINY = Sizes("t5_1_1/tiny", 2, 8, 2, 4, 16, 8, 2, 4, 8, heads=2)


@dataclasses.dataclass(frozen=True)
class Phase:
    name: str
    argv: tuple[str, ...]
    needs_s: float  # the least time left that this phase is started with
    env: tuple[tuple[str, str], ...] = ()


def phases(sizes: Sizes, work: Path) -> list[Phase]:
    """Every phase of the session, in order, writing its files under `work`."""
    python = sys.executable

    def profile(name: str, needs_s: float, lengths: str, *extra: str, env=()) -> Phase:
        argv = (
            python,
            str(HERE / "profile_decode.py"),
            f"--config={sizes.config}",
            "--dtype=bfloat16",
            f"--batch={sizes.decode_batch}",
            f"--input_length={sizes.decode_input_length}",
            f"--lengths={lengths}",
            "--runs=2",  # a large greedy generate took 15 s on the H100; compiles take ~90 s
            f"--json={work / name}.json",
            *extra,
        )
        return Phase(name, argv, needs_s, env)

    def gpu(name: str, needs_s: float, *extra: str, env=()) -> Phase:
        argv = (
            python,
            str(HERE / "gpu.py"),
            "--settle_seconds=0",
            f"--results={work / name}.json",
            f"--decode_config={sizes.config}",
            f"--decode_batch={sizes.decode_batch}",
            f"--decode_input_length={sizes.decode_input_length}",
            f"--new_tokens={sizes.new_tokens}",
            f"--input_length={sizes.input_length}",
            f"--target_length={sizes.target_length}",
            *extra,
        )
        return Phase(name, argv, needs_s, env)

    def train(name: str, needs_s: float, batch: int, *extra: str, env=()) -> Phase:
        return gpu(
            name,
            needs_s,
            "--phases=train",
            f"--train_configs={sizes.config}={batch}",
            *extra,
            env=env,
        )

    dump = f"--xla_dump_to={work / 'hlo'} --xla_dump_hlo_module_re=_predict --xla_dump_hlo_as_text"
    return [
        Phase("device", (python, str(Path(__file__).resolve()), "--device_report"), 5),
        # 40 s on the H200 of 2026-11-28: does cuDNN's bias gradient equal plain autodiff's,
        # and what does each bias form cost (the train step's 26 ms of dbias)?
        Phase(
            "attention_bias_forms",
            (
                python,
                str(HERE / "attention_bias_forms.py"),
                f"--batch={sizes.largest_batch}",
                f"--heads={sizes.heads}",
                f"--input_length={sizes.input_length}",
                f"--target_length={sizes.target_length}",
                "--runs=10",
                f"--json={work / 'attention_bias_forms'}.json",
            ),
            60,
        ),
        # Training first: MFU is what is left to reach (36.6% at batch 80 on the H200 of
        # 2026-11-27). The first phase traces its step (where the other 63% goes) and compiles
        # the init every later phase reads from the cache.
        train(
            "train_largest",
            400,
            sizes.largest_batch,
            "--no_fill",
            "--no_peer",
            f"--train_trace_dir={work / 'train_trace'}",
        ),
        # T5X's and Paxml's XLA GPU training flags were measured on 2026-11-28: 36.1% against
        # 36.2% (docs/performance.md); no longer run. XLA's attention compiled past 170 s there.
        train(
            "mfu_attention_xla",
            240,
            sizes.largest_batch,
            "--no_fill",
            "--no_peer",
            "--train_overrides=attention_implementation=xla",
        ),
        # The H200's memory holds batch 128 without remat (remat at 160 measured 34.0%).
        train("mfu_h200_batch", 150, sizes.h200_batch, "--no_fill", "--no_peer"),
        train("train_at_transformers_batch", 180, sizes.transformers_batch, "--no_fill"),
        gpu("decode_vs_transformers", 120, "--phases=decode"),
        profile(
            "decode_profile",
            150,
            f"{sizes.short_decode},{sizes.new_tokens}",
            "--stepwise",
            f"--trace_dir={work / 'trace'}",
            env=(("XLA_FLAGS", dump),),
        ),
    ]


def device_report() -> int:
    """Phase 1: what the lease runs on, printed."""
    import importlib.metadata

    print(f"load average (1, 5, 15 min): {os.getloadavg()}, {os.cpu_count()} CPU cores")
    for package in ("jax", "jaxlib", "flax", "optax", "orbax-checkpoint", "torch", "transformers"):
        try:
            print(f"{package} {importlib.metadata.version(package)}")
        except importlib.metadata.PackageNotFoundError:
            print(f"{package} not installed")
    if shutil.which("nvidia-smi"):
        subprocess.run(["nvidia-smi"], check=False)
    else:
        print("nvidia-smi: not on this machine")
    import jax

    for device in jax.devices():
        memory = (device.memory_stats() or {}).get("bytes_limit")
        print(f"jax device {device} ({device.device_kind}), bytes_limit {memory}")
    return 0


def run_phase(phase: Phase, timeout_s: float, log_path: Path, env: dict) -> tuple[str, int | None]:
    """Runs one phase in a process group of its own, its output to stdout and `log_path`;
    ('ok' | 'failed' | 'timed out', return code)."""
    process = subprocess.Popen(
        phase.argv,
        cwd=REPO,
        env=_with(env, phase.env),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,  # its workers (benchmarks/isolated.py) go with it on a timeout
        text=True,
        bufsize=1,
    )

    def copy_output():
        with log_path.open("w") as log:
            for line in process.stdout:
                sys.stdout.write(line)
                sys.stdout.flush()
                log.write(line)

    copier = threading.Thread(target=copy_output, daemon=True)
    copier.start()
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        copier.join(timeout=10)
        return "timed out", None
    copier.join(timeout=10)
    return ("ok" if process.returncode == 0 else "failed"), process.returncode


def _with(env: dict, settings: tuple[tuple[str, str], ...]) -> dict:
    """`env` with a phase's settings; XLA_FLAGS are added to those already set."""
    env = dict(env)
    for key, value in settings:
        env[key] = f"{env[key]} {value}" if key == "XLA_FLAGS" and env.get(key) else value
    return env


def figures(work: Path, name: str) -> dict:
    """The headline figures of a phase's JSON: per-step costs, throughputs, ratios, MFU."""
    path = work / f"{name}.json"
    if not path.exists():
        return {}
    data = json.loads(path.read_text())
    if "encoder self" in data:  # attention_bias_forms.py: every row, they are few
        return {"forms": {key: value for key, value in data.items() if isinstance(value, dict)}}
    if "generate" in data:  # profile_decode.py
        keys = ("step_ms", "fixed_s", "compiles_during_timed_calls")
        return {
            part: {key: data[part][key] for key in keys if key in data[part]}
            for part in ("generate", "stepwise")
            if part in data
        } | {"track_ms": data.get("track_ms", {})}
    return {  # harness.Benchmark's results file (gpu.py)
        "sides": {
            side: {
                key: summary[key]
                for key in ("median_s", "throughput", "unit", "batch", "mfu", "track_ms")
                if key in summary
            }
            for side, summary in data.get("sides", {}).items()
        },
        "ratios": {row["row"]: row["ratio"] for row in data.get("comparisons", [])},
    }


class Session:
    """The phases' state: what is done (kept for --resume), and what goes back in $OUT."""

    def __init__(self, work: Path, out: Path, resume: bool):
        self.work, self.out = work, out
        self.done_path = work / "done.json"
        if not resume:  # a new session: the last one's results go, its compilations stay
            for stale in ("logs", "hlo", "trace", "train_trace"):
                shutil.rmtree(work / stale, ignore_errors=True)
            for stale in work.glob("*.json"):
                stale.unlink()
        (work / "logs").mkdir(parents=True, exist_ok=True)
        out.mkdir(parents=True, exist_ok=True)
        self.done = (
            json.loads(self.done_path.read_text()) if resume and self.done_path.exists() else {}
        )
        self.summary = {"started": time.strftime("%Y-%m-%d %H:%M:%S"), "phases": {}}

    def record(self, name: str, result: dict) -> None:
        self.summary["phases"][name] = result
        if result["status"] == "ok":
            self.done[name] = result
            self.done_path.write_text(json.dumps(self.done, indent=2) + "\n")
        self.write_out()

    def write_out(self) -> None:
        """$OUT's files, rewritten whole: a call cut off by its limit still returns them."""
        (self.out / "summary.json").write_text(json.dumps(self.summary, indent=2) + "\n")
        logs = sorted((self.work / "logs").glob("*.log"), key=lambda p: p.stat().st_mtime)
        (self.out / "session.log").write_text(
            "".join(f"===== {log.stem}\n{log.read_text()}" for log in logs)
        )
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
            for path in [*sorted(self.work.glob("*.json")), *logs]:
                archive.add(path, arcname=str(path.relative_to(self.work)))
        (self.out / "results.tar.gz").write_bytes(buffer.getvalue())
        hlo = sorted(
            (self.work / "hlo").glob("*_predict*after_optimizations.txt"),
            key=lambda p: p.stat().st_size,
        )
        if hlo:
            _write_small(self.out / "decode_hlo.txt.gz", gzip.compress(hlo[-1].read_bytes()))
        for folder, name in (("trace", "trace.json.gz"), ("train_trace", "train_trace.json.gz")):
            traces = sorted((self.work / folder).rglob("perfetto_trace.json.gz"))
            if traces:
                _write_small(self.out / name, traces[-1].read_bytes())


def _write_small(path: Path, data: bytes) -> None:
    if len(data) <= LARGEST_FILE:
        path.write_bytes(data)
    else:
        path.with_suffix(".too_large").write_text(f"{len(data)} bytes: kept on the device only\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "gpu_session_out")))
    parser.add_argument("--state_dir", type=Path, default=REPO / ".gpu_session")
    parser.add_argument("--budget_s", type=float, default=480.0)
    parser.add_argument(
        "--resume", action="store_true", help="skip the phases a last call finished"
    )
    parser.add_argument("--only", default="", help="comma-separated phase names (default: all)")
    parser.add_argument("--tiny", action="store_true", help="toy sizes: test every phase on a CPU")
    parser.add_argument("--device_report", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.device_report:
        return device_report()
    deadline = time.monotonic() + args.budget_s
    work = args.state_dir.resolve()
    session = Session(work, args.out.resolve(), args.resume)
    env = {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "JAX_COMPILATION_CACHE_DIR": str(work / "jax_cache"),
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
        "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0",
    }
    wanted = set(filter(None, args.only.split(",")))
    for phase in phases(TINY if args.tiny else Sizes(), work):
        if wanted and phase.name not in wanted:
            continue
        if phase.name in session.done:
            print(f"===== {phase.name}: done in an earlier call", flush=True)
            session.record(phase.name, {**session.done[phase.name], "status": "done earlier"})
            continue
        left = deadline - time.monotonic()
        if left < phase.needs_s:
            print(f"===== {phase.name}: skipped, {left:.0f} s left of the budget", flush=True)
            session.record(phase.name, {"status": "skipped: budget"})
            continue
        print(f"===== {phase.name} ({left:.0f} s left)", flush=True)
        start = time.monotonic()
        status, code = run_phase(phase, left, work / "logs" / f"{phase.name}.log", env)
        seconds = round(time.monotonic() - start, 1)
        print(f"===== {phase.name}: {status} in {seconds} s", flush=True)
        session.record(
            phase.name,
            {"status": status, "returncode": code, "seconds": seconds, **figures(work, phase.name)},
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
