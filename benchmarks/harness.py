"""One way of measuring for every benchmark, so that no figure depends on which script took it.

A `Benchmark` names the machine (CPU model, cores), waits (up to --settle_seconds) for the
1-minute load average to fall to IDLE_LOAD and labels the run "shared CPU" when it did not:
no published number may come from such a run. Each side is timed over at least MIN_REPEATS
repetitions after a warm-up, sides of one measurement taking turns so that they see the same
neighbours (training steps run in blocks instead: see time_in_blocks), and is summarised as
median/min/max wall seconds, median CPU-seconds (of this process, or of whatever clock the side
names: its child processes, a server's pid) and throughput. The run is written to benchmarks/results/<name>.json with the load before and
after, the git commit and the settings; benchmarks/report.py renders those files.

Only the standard library is imported: the SeqIO peer's interpreter imports this module too.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import resource
import statistics
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

IDLE_LOAD = 0.3
MIN_REPEATS = 5
SHARED_LABEL = "shared CPU"
RESULTS_DIR = Path(__file__).resolve().parent / "results"
REPO = Path(__file__).resolve().parents[1]


def cpu_model(cpuinfo: str) -> str:
    """The 'model name' of /proc/cpuinfo's text, else 'unknown'."""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name" and value.strip():
            return value.strip()
    return "unknown"


def machine() -> dict:
    try:
        cpu = cpu_model(Path("/proc/cpuinfo").read_text())
    except OSError:
        cpu = platform.processor() or "unknown"
    return {"cpu": cpu, "cores": os.cpu_count()}


def is_shared(load_before: float) -> bool:
    """A run that started above IDLE_LOAD measured its neighbours too."""
    return load_before > IDLE_LOAD


def load_average() -> float:
    return os.getloadavg()[0]


def wait_for_idle(settle_seconds: float, poll_seconds: float = 5.0) -> float:
    """The 1-minute load average, after waiting up to `settle_seconds` for it to reach IDLE_LOAD
    (a previous benchmark's load takes about two minutes to decay)."""
    deadline = time.monotonic() + settle_seconds
    load = load_average()
    if load > IDLE_LOAD and settle_seconds > 0:
        print(
            f"load average {load:.2f} > {IDLE_LOAD}: waiting up to {settle_seconds:.0f} s "
            "for it to settle",
            flush=True,
        )
        while load > IDLE_LOAD and time.monotonic() < deadline:
            time.sleep(poll_seconds)
            load = load_average()
    return load


def git_commit() -> tuple[str, bool]:
    """(short commit, whether tracked files differ from it). $T5FORGE_BENCH_COMMIT, where set,
    names it: a lent GPU machine's copy of the tree carries a git HEAD of its own (the
    session's first checkout, on 2026-11-28), with the tree's changes as 'dirty'. Else git's;
    outside git, 'unknown'. Result files of earlier benchmarks (benchmarks/results/) do not
    count: they change nothing measured, and `make bench` rewrites them one after another."""
    if os.environ.get("T5FORGE_BENCH_COMMIT"):
        return os.environ["T5FORGE_BENCH_COMMIT"], False

    def git(*args):
        return subprocess.run(
            ["git", *args], cwd=REPO, capture_output=True, text=True, check=True
        ).stdout.strip()

    try:
        return git("rev-parse", "--short", "HEAD"), bool(
            git("status", "--porcelain", "--untracked-files=no", "--", ".", ":!benchmarks/results")
        )
    except (OSError, subprocess.CalledProcessError):
        return "unknown", False


def children_cpu_seconds() -> float:
    """CPU-seconds of the child processes waited for so far (subprocess sides)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def pid_cpu_seconds(pid: int) -> Callable[[], float]:
    """A clock of another running process's CPU-seconds (a server under load)."""
    ticks = os.sysconf("SC_CLK_TCK")

    def clock() -> float:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / ticks  # utime, stime

    return clock


def repeats(text: str) -> int:
    """argparse type of a repetition count: median/min/max need at least MIN_REPEATS."""
    value = int(text)
    if value < MIN_REPEATS:
        raise argparse.ArgumentTypeError(
            f"at least {MIN_REPEATS} timed repetitions are needed (got {value})"
        )
    return value


def add_arguments(parser: argparse.ArgumentParser, name: str) -> None:
    parser.add_argument(
        "--settle_seconds",
        type=float,
        default=150,
        help=f"wait this long at most for the load average to reach {IDLE_LOAD}",
    )
    parser.add_argument("--results", type=Path, default=RESULTS_DIR / f"{name}.json")


@dataclass
class Samples:
    """Per-repetition wall and CPU seconds of one side, and its last output."""

    seconds: list[float] = field(default_factory=list)
    cpu_seconds: list[float] = field(default_factory=list)
    output: object = None


def _time_once(fn: Callable[[], object], samples: Samples, cpu_clock: Callable[[], float]):
    """One timed call; a side with a `cpu_seconds` attribute (a process of its own,
    benchmarks/isolated.py) is charged by that clock instead of `cpu_clock`."""
    clock = getattr(fn, "cpu_seconds", cpu_clock)
    wall, cpu = time.perf_counter(), clock()
    samples.output = fn()
    samples.seconds.append(time.perf_counter() - wall)
    samples.cpu_seconds.append(clock() - cpu)


def _time_groups(
    fns: dict[str, Callable[[], object]],
    groups: list[list[str]],
    repeats: int,
    warmup: int,
    cpu_clock: Callable[[], float],
) -> dict[str, Samples]:
    """For each group of sides in turn: their warm-ups, then `repeats` rounds of one timed
    call each."""
    samples = {name: Samples() for name in fns}
    for group in groups:
        for name in group:
            for _ in range(warmup):
                samples[name].output = fns[name]()
        for _ in range(repeats):
            for name in group:
                _time_once(fns[name], samples[name], cpu_clock)
    return samples


def time_interleaved(
    fns: dict[str, Callable[[], object]],
    repeats: int,
    warmup: int = 1,
    cpu_clock: Callable[[], float] = time.process_time,
) -> dict[str, Samples]:
    """Runs every side `warmup` times, then `repeats` rounds in which each side runs once."""
    return _time_groups(fns, [list(fns)], repeats, warmup, cpu_clock)


def time_in_blocks(
    fns: dict[str, Callable[[], object]],
    repeats: int,
    warmup: int = 1,
    cpu_clock: Callable[[], float] = time.process_time,
) -> dict[str, Samples]:
    """Runs each side's warm-up and `repeats` timed calls back to back, one side after another.

    For training steps: XLA:CPU maps a fresh temp buffer (4.2 GB for T5 1.1 small's step) at
    every execution. Right after another side's step, on this project's VMs, t5forge's step ran
    ~1.3 s slower (11 s instead of 9) even 3 s later, whoever that side was; back to back, as
    a training loop runs, it did not. Interleaving measured that artifact, not the step.
    """
    return _time_groups(fns, [[name] for name in fns], repeats, warmup, cpu_clock)


def summarize(samples: Samples, work: float, unit: str) -> dict:
    """Median/min/max seconds, median CPU-seconds and `work` per median second."""
    median = statistics.median(samples.seconds)
    return {
        "repeats": len(samples.seconds),
        "median_s": median,
        "min_s": min(samples.seconds),
        "max_s": max(samples.seconds),
        "cpu_seconds": statistics.median(samples.cpu_seconds),
        "throughput": work / median,
        "unit": unit,
    }


def ratio(ours: dict, peer: dict, metric: str) -> float:
    """How many times better `ours` is: throughput over throughput, or latency under latency
    ('latency': the median call; 'p99_ms': a load test's 99th-percentile request)."""
    if metric == "latency":
        return peer["median_s"] / ours["median_s"]
    if metric == "p99_ms":
        return peer["p99_ms"] / ours["p99_ms"]
    return ours["throughput"] / peer["throughput"]


class Benchmark:
    """One run of one benchmark script: its sides, their comparisons and its results file."""

    def __init__(
        self, name: str, settings: dict, settle_seconds: float = 0.0, results: Path | None = None
    ):
        self.name, self.results = name, results or RESULTS_DIR / f"{name}.json"
        self.settings = {
            key: str(value) if isinstance(value, Path) else value for key, value in settings.items()
        }
        self.machine = machine()
        self.load_before = wait_for_idle(settle_seconds)
        self.shared = is_shared(self.load_before)
        self.sides: dict[str, dict] = {}
        self.comparisons: list[dict] = []
        print(
            f"{name}: {self.machine['cpu']}, {self.machine['cores']} cores, 1-minute load "
            f"average {self.load_before:.2f} before",
            flush=True,
        )
        if self.shared:
            print(
                f"load average {self.load_before:.2f} > {IDLE_LOAD}: results labelled "
                f"'{SHARED_LABEL}', not for publishing",
                flush=True,
            )

    @classmethod
    def from_args(cls, name: str, args: argparse.Namespace) -> Benchmark:
        settings = {k: v for k, v in vars(args).items() if k not in ("settle_seconds", "results")}
        return cls(name, settings, args.settle_seconds, args.results)

    def run(
        self,
        fns: dict[str, Callable[[], object]],
        repeats: int,
        work: float,
        unit: str,
        warmup: int = 1,
        cpu_clock: Callable[[], float] = time.process_time,
        blocks: bool = False,
    ) -> dict:
        """Times the sides in turns (or `blocks`: one side's runs back to back, then the next's,
        see time_in_blocks) and records them; returns each side's last output."""
        timer = time_in_blocks if blocks else time_interleaved
        samples = timer(fns, repeats, warmup, cpu_clock)
        for side, side_samples in samples.items():
            self.record(side, side_samples, work, unit)
        return {side: side_samples.output for side, side_samples in samples.items()}

    def record(self, side: str, samples: Samples, work: float, unit: str, **extra) -> dict:
        """Adds a side measured elsewhere (another interpreter, a load generator)."""
        summary = {**summarize(samples, work, unit), **extra}
        self.sides[side] = summary
        print(
            f"  {side:36s} {summary['throughput']:10.1f} {unit}  median "
            f"{summary['median_s']:.3f} s (min {summary['min_s']:.3f}, max "
            f"{summary['max_s']:.3f}), {summary['cpu_seconds']:.2f} CPU-s",
            flush=True,
        )
        return summary

    def compare(
        self,
        row: str,
        ours: str,
        peer: str,
        metric: str = "throughput",
        peer_label: str | None = None,
    ) -> float:
        """Records how many times better side `ours` is than side `peer` (named `peer_label`)."""
        value = ratio(self.sides[ours], self.sides[peer], metric)
        self.comparisons.append(
            {
                "row": row,
                "ours": ours,
                "peer": peer,
                "peer_label": peer_label or peer,
                "metric": metric,
                "ratio": value,
            }
        )
        print(f"  {ours} / {peer}: {value:.2f}x ({metric})", flush=True)
        return value

    def peer_missing(
        self, row: str, ours: str, peer: str, why: str, metric: str = "throughput"
    ) -> None:
        """A comparison whose peer could not run here, said so instead of a number."""
        self.comparisons.append(
            {
                "row": row,
                "ours": ours,
                "peer": peer,
                "peer_label": peer,
                "metric": metric,
                "ratio": None,
                "missing": why,
            }
        )
        print(f"  {ours} / {peer}: {why}", flush=True)

    def to_json(self, load_after: float) -> dict:
        commit, dirty = git_commit()
        return {
            "name": self.name,
            "machine": self.machine,
            "load_before": self.load_before,
            "load_after": load_after,
            "shared_cpu": self.shared,
            "commit": commit,
            "dirty": dirty,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "settings": self.settings,
            "sides": self.sides,
            "comparisons": self.comparisons,
        }

    def finish(self) -> Path:
        load_after = load_average()
        self.results.parent.mkdir(parents=True, exist_ok=True)
        self.results.write_text(json.dumps(self.to_json(load_after), indent=2) + "\n")
        label = f" ({SHARED_LABEL})" if self.shared else ""
        print(
            f"1-minute load average {self.load_before:.2f} before, {load_after:.2f} after; "
            f"wrote {self.results}{label}",
            flush=True,
        )
        return self.results
