"""Serving throughput and latency: `t5forge serve` with dynamic (static-scheduler) batching vs
the same server with batching off (--max_batch_size 1), driven over loopback by a bounded
asyncio httpx load.

For each model (the `make demo` model's config and T5 1.1 small, random weights, float32) a
real `t5forge serve` process is started on a Hugging Face directory written here, then for
each concurrency level C (1, 8, 32, 64) C clients send greedy /v1/predict requests back to
back, one sentence each from the bundled en-de validation split, until --requests answers
arrived (a round, cut short after --seconds). The EOS column of the output projection is
zeroed (as in benchmarks/decode.py) so every request generates exactly --new_tokens tokens on
both sides. Each level is timed by benchmarks/harness.py (--runs rounds after a warm-up round;
CPU-seconds are the server process's) and reported as requests/s, p50/p99 latency over the
timed rounds, errors (non-200 answers; requests/s counts only the 200s), and the mean rows
per device batch read from the server's /metrics. Batching on is compared with off at
GOAL_CONCURRENCY (32 clients, where the issue states its goal) and at the highest concurrency;
every level's ratio and error counts are printed. Results go to benchmarks/results/serve.json
(labelled "shared CPU" when the load average was above 0.3 at the start; `benchmarks/report.py
--write-docs` puts its comparisons in docs/benchmarks.md's table) and a plot to
docs/images/serve_throughput.png.

A quick check that it runs end to end (a few minutes; writes nothing under the repository):

    python benchmarks/serve.py --models demo --concurrency 1 4 --requests 8 --new_tokens 4 \
        --settle_seconds 0 --results /tmp/serve.json --plot /tmp/serve.png
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gzip
import json
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import harness  # noqa: E402  (same directory)
import same_weights  # noqa: E402  (same directory)

PLOT = ROOT / "docs" / "images" / "serve_throughput.png"
DATA = ROOT / "t5forge" / "tasks" / "data" / "en_de_lohelp"
DEMO_GIN = ROOT / "t5forge" / "configs" / "examples" / "demo_en_de.gin"
MODELS = {
    "demo": "the make-demo model (T5 1.1 layout, width 256, 3+3 layers, 4k vocabulary)",
    "t5_1_1_small": "T5 1.1 small (512 wide, 8+8 layers, 32k vocabulary)",
}
GOAL_CONCURRENCY = 32


def _config(name: str):
    from t5forge.models.presets import get_config

    if name == "t5_1_1_small":
        return get_config("t5_1_1/small", dtype="float32")
    import gin

    from t5forge.checkpoints.reader import resolve_config
    from t5forge.gin_config.gin_flags import PACKAGE_CONFIGS

    gin.add_config_file_search_path(str(PACKAGE_CONFIGS))
    return resolve_config(DEMO_GIN)


def write_model(name: str, directory: Path, vocab: Path) -> Path:
    """A Hugging Face dir with random weights whose rows never emit EOS."""
    import jax

    from t5forge.interop.huggingface import save_hf_dir
    from t5forge.models.model import build_model

    config = _config(name)
    params = jax.device_get(build_model(config).init_params(jax.random.PRNGKey(0)))
    params = same_weights.never_eos(params)
    return save_hf_dir(params, config, directory / name, vocab_path=vocab, extra_ids=100)


def vocabulary(directory: Path) -> Path:
    from t5forge.data.vocab_trainer import file_texts, train_vocabulary

    path = directory / "spiece.model"
    source = [str(DATA / "train.jsonl.gz")]
    texts = list(file_texts(source, "en")) + list(file_texts(source, "de"))
    train_vocabulary(texts, path, vocab_size=4000, extra_ids=100, progress=False)
    return path


def validation_sentences() -> list[str]:
    with gzip.open(DATA / "validation.jsonl.gz", "rt") as lines:
        return [f"translate English to German: {json.loads(line)['en']}" for line in lines]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def server_process(model_dir: Path, flags: list[str]):
    """A `t5forge serve` process with `flags`; yields (base url, seconds until ready, pid)."""
    return http_server(
        [sys.executable, "-m", "t5forge", "serve", "--checkpoint", str(model_dir), *flags]
    )


@contextlib.contextmanager
def http_server(command: list[str]):
    """The server process `command` + `--port N` starts; yields (base url, seconds until its
    /healthz answered 200, pid) once it has also compiled every shape (t5forge compiles
    scoring's and beam search's after it reports ready: no load is timed beside them), and
    stops it with SIGTERM."""
    port = free_port()
    started = time.perf_counter()
    process = subprocess.Popen([*command, "--port", str(port)], cwd=ROOT)
    url = f"http://127.0.0.1:{port}"
    try:
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"the server exited with {process.returncode}")
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{url}/healthz", timeout=5).status_code == 200:
                    break
            time.sleep(0.5)
        ready = time.perf_counter() - started
        while (health := httpx.get(f"{url}/healthz", timeout=5).json()).get(
            "compiled", 0
        ) < health.get("of", 0):
            time.sleep(0.5)
        if health.get("of"):
            print(f"  every shape compiled {time.perf_counter() - started:.1f} s after start")
        yield url, ready, process.pid
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=120)


def _server(model_dir: Path, max_batch_size: int, args):
    """This benchmark's server: greedy requests of exactly --new_tokens."""
    return server_process(
        model_dir,
        [
            # Static batches, as when its published table was measured (closed-loop clients
            # asking for equal lengths); serve_load.py compares the schedulers.
            "--scheduler",
            "static",
            "--max_batch_size",
            str(max_batch_size),
            "--max_wait_ms",
            str(args.max_wait_ms),
            "--max_queue",
            "1024",
            "--max_input_length",
            "64",
            "--max_new_tokens",
            str(args.new_tokens),
            "--max_new_tokens_limit",
            str(args.new_tokens),
            "--max_target_length",
            "16",
            "--warmup_num_beams",
            "0",
            "--input_length_policy",
            "truncate",
            "--log_level",
            "warning",
        ],
    )


def _batch_stats(url: str) -> tuple[float, float]:
    """(device batches, rows) of generation so far, from /metrics."""
    from prometheus_client.parser import text_string_to_metric_families

    values = {}
    for family in text_string_to_metric_families(httpx.get(f"{url}/metrics").text):
        for sample in family.samples:
            if sample.labels.get("kind") == "generate":
                values[sample.name] = sample.value
    return values.get("t5forge_batch_size_count", 0.0), values.get("t5forge_batch_size_sum", 0.0)


async def _load(url: str, concurrency: int, total: int, seconds: float, sentences, new_tokens):
    """C clients back to back until `total` answers or `seconds`; (latencies, errors)."""
    latencies, errors, sent = [], 0, 0
    deadline = time.perf_counter() + seconds
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)

    async with httpx.AsyncClient(base_url=url, timeout=300, limits=limits) as client:

        async def one_client():
            nonlocal errors, sent
            while sent < total and time.perf_counter() < deadline:
                text = sentences[sent % len(sentences)]
                sent += 1
                began = time.perf_counter()
                response = await client.post(
                    "/v1/predict", json={"inputs": [text], "max_new_tokens": new_tokens}
                )
                if response.status_code == 200:
                    latencies.append(time.perf_counter() - began)
                else:
                    errors += 1

        await asyncio.gather(*(one_client() for _ in range(concurrency)))
    return latencies, errors


def _level(bench, side: str, url: str, pid: int, concurrency: int, args, sentences) -> dict:
    """Times --runs rounds of `total` requests at one concurrency; records the side."""
    total = max(args.requests, 2 * concurrency)
    rounds = []

    def one_round():
        rounds.append(
            asyncio.run(_load(url, concurrency, total, args.seconds, sentences, args.new_tokens))
        )

    batches, rows = _batch_stats(url)
    samples = harness.time_interleaved(
        {side: one_round}, args.runs, cpu_clock=harness.pid_cpu_seconds(pid)
    )[side]
    batches_after, rows_after = _batch_stats(url)
    timed = rounds[-args.runs :]
    latencies = np.array([latency for answers, _ in timed for latency in answers]) * 1000
    short = sum(len(answers) + errors < total for answers, errors in timed)
    errors = sum(errors for _, errors in timed)
    summary = bench.record(
        side,
        samples,
        sum(len(answers) for answers, _ in timed) / len(timed),  # answered per round
        "requests/s",
        concurrency=concurrency,
        requests_per_round=total,
        errors=errors,
        rounds_cut_short=short,
        p50_ms=float(np.percentile(latencies, 50)) if len(latencies) else None,
        p99_ms=float(np.percentile(latencies, 99)) if len(latencies) else None,
        mean_batch_rows=(rows_after - rows) / max(batches_after - batches, 1),
    )
    print(
        f"    {errors} errors in {args.runs * total} requests, p50 {summary['p50_ms'] or 0:.0f} "
        f"ms, p99 {summary['p99_ms'] or 0:.0f} ms, {summary['mean_batch_rows']:.1f} rows per "
        f"device batch" + (f", {short} rounds stopped by --seconds" if short else ""),
        flush=True,
    )
    return summary


def _ratio(on: dict, off: dict) -> float:
    """Requests/s with batching on over off (NaN when every request without it failed)."""
    return harness.ratio(on, off, "throughput") if off["throughput"] else float("nan")


def _compare(bench, name: str, on_mode: str, off_mode: str, on: list, off: list) -> None:
    """Prints on/off requests/s and errors by concurrency; records the ratio at
    GOAL_CONCURRENCY and at the highest concurrency measured (a row names its errors)."""
    print(f"{name}: clients, requests/s on / off = ratio, errors on / off", flush=True)
    for r, o in zip(on, off):
        print(
            f"  {r['concurrency']:4d}  {r['throughput']:8.1f} / {o['throughput']:8.1f} = "
            f"{_ratio(r, o):5.2f}x  errors {r['errors']} / {o['errors']}",
            flush=True,
        )
    by_clients = {r["concurrency"]: (r, o) for r, o in zip(on, off)}
    for clients in sorted({c for c in by_clients if c == GOAL_CONCURRENCY} | {max(by_clients)}):
        r, o = by_clients[clients]
        errors = f" ({r['errors']} / {o['errors']} errors)" if r["errors"] or o["errors"] else ""
        row = f"serve {name}, {clients} concurrent clients, batching on vs off{errors}"
        sides = (f"{name}, {on_mode}, {clients} clients", f"{name}, {off_mode}, {clients} clients")
        if o["throughput"]:
            bench.compare(row, *sides, peer_label=off_mode)
        else:
            bench.peer_missing(row, *sides, "every request failed")


def _plot(levels: dict, new_tokens: int, label: str, path: Path) -> None:
    """Requests/s and p50/p99 latency by concurrency; `levels[model][mode]` lists summaries."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 2 * len(levels), figsize=(6 * len(levels), 3.6), squeeze=False)
    for column, (model, modes) in enumerate(levels.items()):
        throughput, latency = axes[0][2 * column], axes[0][2 * column + 1]
        for color, (mode, runs) in zip(("C0", "C1"), modes.items()):
            clients = [r["concurrency"] for r in runs]
            throughput.plot(clients, [r["throughput"] for r in runs], "o-", color=color, label=mode)
            latency.plot(
                clients, [r["p99_ms"] for r in runs], "o-", color=color, label=f"{mode}: p99"
            )
            latency.plot(
                clients, [r["p50_ms"] for r in runs], "o--", color=color, label=f"{mode}: p50"
            )
        for axis, name in ((throughput, "requests/s"), (latency, "latency (ms)")):
            axis.set_xscale("log", base=2)
            axis.set_xticks(clients, [str(c) for c in clients])
            axis.set_xlabel("concurrent clients")
            axis.set_ylabel(name)
            axis.set_title(f"{model}: {name}")
            axis.legend(fontsize=7)
    figure.suptitle(
        f"t5forge serve, greedy, {new_tokens} new tokens per request ({label})", fontsize=9
    )
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)


def main() -> int:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--concurrency", nargs="+", type=int, default=[1, 8, 32, 64])
    parser.add_argument(
        "--requests",
        type=int,
        default=64,
        help="requests per round (at least 2x the concurrency); fewer for a quick check",
    )
    parser.add_argument(
        "--runs", type=harness.repeats, default=harness.MIN_REPEATS, help="timed rounds per level"
    )
    parser.add_argument("--seconds", type=float, default=120, help="time cap per round")
    parser.add_argument("--new_tokens", type=int, default=32)
    parser.add_argument(
        "--max_batch_size", type=int, default=32, help="the batching-on server's device batch"
    )
    parser.add_argument("--max_wait_ms", type=float, default=5.0)
    parser.add_argument("--plot", type=Path, default=PLOT, help="where the plot goes")
    harness.add_arguments(parser, "serve")
    args = parser.parse_args()

    bench = harness.Benchmark.from_args("serve", args)
    sentences = validation_sentences()
    levels = {}
    with tempfile.TemporaryDirectory() as scratch:
        vocab = vocabulary(Path(scratch))
        for name in args.models:
            print(f"{name}: {MODELS[name]}", flush=True)
            model_dir = write_model(name, Path(scratch), vocab)
            modes = {}
            for mode, batch in (
                (f"batching on (max {args.max_batch_size})", args.max_batch_size),
                ("batching off", 1),
            ):
                with _server(model_dir, batch, args) as (url, ready_s, pid):
                    print(f"{name}, {mode}: ready in {ready_s:.0f} s", flush=True)
                    modes[mode] = [
                        _level(bench, f"{name}, {mode}, {c} clients", url, pid, c, args, sentences)
                        for c in args.concurrency
                    ]
            levels[name] = modes
            (on_mode, on), (off_mode, off) = modes.items()
            _compare(bench, name, on_mode, off_mode, on, off)
    bench.finish()
    _plot(levels, args.new_tokens, harness.SHARED_LABEL if bench.shared else "idle CPU", args.plot)
    print(f"wrote {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
