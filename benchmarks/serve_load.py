"""Serving under open-loop traffic: continuous vs static batching at several offered loads, and
the peer a user would otherwise deploy on a CPU, a FastAPI server over CTranslate2.

Requests arrive as a Poisson process at each offered rate (requests/s) whether or not the
earlier ones were answered (open loop: an overloaded server is not given the breaks that
closed-loop clients give it). Each streams a greedy continuation of one to three sentences of
the bundled en-de validation split (inputs truncated to 64 tokens) with max_new_tokens drawn
log-uniformly from 8 to 128; the arrival times, inputs and lengths come from one seeded stream,
identical for every side. The models are benchmarks/serve.py's (the `make demo` model's
config and T5 1.1 small, random weights, float32, the EOS logit's column zeroed so that every
request makes exactly its max_new_tokens). For each (model, scheduler, rate): completed
requests/s and new tokens/s over the window from the first arrival to the last answer, p50 and
p99 time to first token (TTFT) and latency, and requests not answered within --timeout, each
the median of --repeats windows of the same arrivals run back to back (every window's p99
latency and p50 TTFT are printed and kept: the spread). Each scheduler runs in its own
`t5forge serve` process, one after the other, and its ready time is recorded.

Start-up comes first, for the models in --startup_models: benchmarks/serve_startup.py's first
start on an empty compile cache and --restarts restarts on the one it filled, each timed to
ready and to every shape compiled; the median restart is what an operator's restart costs.

Then the same load goes to the peer, benchmarks/serve_ct2.py in a process of its own: the same
Hugging Face weights converted by CTranslate2's TransformersConverter (benchmarks/decode.py's
conversion), float32, decoded greedily with CTranslate2's own batching (every request that
waits while its translator is busy goes into its next `translate_batch` call) and streamed
through its per-token callback, so its TTFT is measured as t5forge's is. One line checks that
it makes the same greedy tokens as the continuous t5forge server for a short input and one cut
to 64 tokens. Continuous batching is compared with static batching and with CTranslate2 at
every rate; without ctranslate2 installed its row says how to install it.

Results go to benchmarks/results/serve_load.json (labelled "shared CPU" when the 1-minute
load average was above 0.3 at the start: such numbers are not for publishing) and a plot to
docs/images/serve_load.png. A quick check that it runs (demo model, two rates, ~5 minutes;
writes under /tmp only):

    python benchmarks/serve_load.py --quick
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import decode  # noqa: E402  (same directory: CTranslate2's conversion of the same weights)
import harness  # noqa: E402  (same directory)
import serve  # noqa: E402  (same directory: the models, vocabulary, sentences, server process)
import serve_startup  # noqa: E402  (same directory)

PLOT = ROOT / "docs" / "images" / "serve_load.png"
SCHEDULERS = ("continuous", "static")
PEER = "ctranslate2"
PEER_SERVER = Path(__file__).resolve().parent / "serve_ct2.py"
CHECK_NEW_TOKENS = 16  # per input of the check that the peer decodes as t5forge does
# Offered loads (requests/s) per model: from light to past what static batching sustains
# on a 2-core CPU.
# The levels issue 37 publishes: one run covers both models.
RATES = {"demo": [2.0, 8.0, 16.0], "t5_1_1_small": [2.0, 4.0, 6.0]}
MIN_NEW_TOKENS, MAX_NEW_TOKENS = 8, 128
MAX_INPUT_LENGTH = 64


def workload(rate: float, seconds: float, sentences: list[str], seed: int) -> list[dict]:
    """The requests of one level: arrival time (s), text and max_new_tokens of each."""
    rng = random.Random(seed)
    requests, arrival = [], rng.expovariate(rate)
    while arrival < seconds:
        text = " ".join(rng.choice(sentences) for _ in range(rng.randint(1, 3)))
        span = np.log(MAX_NEW_TOKENS / MIN_NEW_TOKENS)
        new_tokens = int(round(MIN_NEW_TOKENS * np.exp(rng.random() * span)))
        requests.append({"at": arrival, "text": text, "max_new_tokens": new_tokens})
        arrival += rng.expovariate(rate)
    return requests


async def _one(client: httpx.AsyncClient, request: dict, began: float, timeout: float) -> dict:
    """Streams one request; its TTFT, latency and tokens (None latency: failed or too slow)."""
    body = {
        "inputs": [request["text"]],
        "max_new_tokens": request["max_new_tokens"],
        "stream": True,
    }
    sent, first, tokens = time.perf_counter(), None, 0
    try:
        async with asyncio.timeout(timeout):
            async with client.stream("POST", "/v1/predict", json=body) as response:
                if response.status_code != 200:
                    return {"latency": None, "status": response.status_code}
                async for line in response.aiter_lines():
                    if line.startswith("data: {") and '"token"' in line:
                        first = first or time.perf_counter()
                        tokens += 1
    except (TimeoutError, httpx.TransportError) as error:
        return {"latency": None, "status": type(error).__name__}
    done = time.perf_counter()
    return {
        "latency": done - sent,
        "ttft": (first or done) - sent,
        "tokens": tokens,
        "finished": done - began,
    }


async def _offer(url: str, requests: list[dict], timeout: float) -> list[dict]:
    """Sends each request at its arrival time, answered or not; every request's outcome."""
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=64)
    async with httpx.AsyncClient(base_url=url, timeout=None, limits=limits) as client:
        began, tasks = time.perf_counter(), []
        for request in requests:
            await asyncio.sleep(max(0.0, began + request["at"] - time.perf_counter()))
            tasks.append(asyncio.create_task(_one(client, request, began, timeout)))
        return await asyncio.gather(*tasks)


def _window(url: str, requests: list[dict], cpu, args) -> dict:
    """One window of `requests`: completed requests, its length (first arrival to last answer),
    the server's CPU-seconds, new tokens/s and the latency percentiles (ms)."""
    cpu_before = cpu()
    outcomes = asyncio.run(_offer(url, requests, args.timeout))
    answered = [o for o in outcomes if o["latency"] is not None]
    window = max((o["finished"] for o in answered), default=args.seconds)

    def percentile(name: str, q: float) -> float | None:
        return float(np.percentile([o[name] for o in answered], q) * 1000) if answered else None

    return {
        "answered": len(answered),
        "failed": len(outcomes) - len(answered),
        "failures": sorted(str(o["status"]) for o in outcomes if o["latency"] is None),
        "window": window,
        "cpu": cpu() - cpu_before,
        "new_tokens_per_s": sum(o["tokens"] for o in answered) / window,
        "p50_ttft_ms": percentile("ttft", 50),
        "p99_ttft_ms": percentile("ttft", 99),
        "p50_ms": percentile("latency", 50),
        "p99_ms": percentile("latency", 99),
    }


def _median(values: list) -> float | None:
    known = [v for v in values if v is not None]
    return float(np.median(known)) if known else None


def _level(bench, side: str, url: str, pid: int, requests: list[dict], args) -> dict:
    """The level's --repeats windows back to back (the same arrivals each time): the median of
    each figure, with every window's p99 latency and p50 TTFT kept for the spread."""
    cpu = harness.pid_cpu_seconds(pid)
    runs = [_window(url, requests, cpu, args) for _ in range(args.repeats)]
    samples = harness.Samples(
        seconds=[run["window"] for run in runs], cpu_seconds=[run["cpu"] for run in runs]
    )
    figures = ("new_tokens_per_s", "p50_ttft_ms", "p99_ttft_ms", "p50_ms", "p99_ms")
    summary = bench.record(
        side,
        samples,
        _median([run["answered"] for run in runs]),
        "requests/s",
        offered=len(requests),
        failed=max(run["failed"] for run in runs),
        failures=[failure for run in runs for failure in run["failures"]],  # status or error
        **{name: _median([run[name] for run in runs]) for name in figures},
        p99_ms_runs=[run["p99_ms"] for run in runs],
        p50_ttft_ms_runs=[run["p50_ttft_ms"] for run in runs],
    )
    spread = ""
    if args.repeats > 1:
        shown = {
            name: "/".join(f"{value or 0:.0f}" for value in summary[f"{name}_runs"])
            for name in ("p99_ms", "p50_ttft_ms")
        }
        spread = f" (windows: p99 {shown['p99_ms']}, TTFT p50 {shown['p50_ttft_ms']})"
    print(
        f"    {_median([run['answered'] for run in runs]):.0f}/{len(requests)} answered, "
        f"{summary['new_tokens_per_s']:.0f} new "
        f"tokens/s, TTFT p50/p99 {summary['p50_ttft_ms'] or 0:.0f}/"
        f"{summary['p99_ttft_ms'] or 0:.0f} ms, latency p50/p99 {summary['p50_ms'] or 0:.0f}/"
        f"{summary['p99_ms'] or 0:.0f} ms{spread}",
        flush=True,
    )
    return summary


def _flags(scheduler: str, compile_cache: Path, args) -> list[str]:
    return [
        "--scheduler", scheduler,
        "--max_batch_size", str(args.max_batch_size),
        "--max_queue", "4096",
        "--max_input_length", str(MAX_INPUT_LENGTH),
        "--input_length_policy", "truncate",
        "--max_new_tokens", str(MAX_NEW_TOKENS),
        "--max_new_tokens_limit", str(MAX_NEW_TOKENS),
        "--max_target_length", "16",
        "--warmup_num_beams", "0",
        "--compile_cache", str(compile_cache),
        "--log_level", "warning",
    ]  # fmt: skip


def _greedy_tokens(url: str, texts: list[str]) -> list[list[int]]:
    """Each text's first CHECK_NEW_TOKENS greedy tokens, streamed from the server at `url`."""
    outputs = []
    for text in texts:
        body = {"inputs": [text], "max_new_tokens": CHECK_NEW_TOKENS, "stream": True}
        with httpx.stream("POST", f"{url}/v1/predict", json=body, timeout=60) as response:
            lines = [line for line in response.iter_lines() if line.startswith("data: {")]
        events = [json.loads(line.removeprefix("data: ")) for line in lines]
        outputs.append([event["token"] for event in events if "token" in event])
    return outputs


def _levels(bench, name: str, side: str, url: str, pid: int, rates, sentences, args) -> list:
    """One side at every rate: its level summaries."""
    return [
        _level(
            bench,
            f"{name}, {side}, {rate:g} requests/s offered",
            url,
            pid,
            workload(rate, args.seconds, sentences, args.seed),
            args,
        )
        for rate in rates
    ]


def _await_store(cache: Path, timeout: float = 300) -> None:
    """Waits until a first start has written its compiled programs under `cache` (the server
    serialises them after every shape is compiled, while it already serves: a py-spy profile
    put 4.7% of a first window's samples in that write)."""
    deadline = time.monotonic() + timeout
    while not any((cache / "serving").glob("*.executables")):
        if time.monotonic() > deadline:
            print(f"  no stored programs under {cache} after {timeout:.0f} s", flush=True)
            return
        time.sleep(0.5)


def _schedulers(bench, name: str, model_dir: Path, scratch: Path, rates, sentences, checks, args):
    """Every t5forge scheduler at every rate: ({scheduler: [level summaries]}, the continuous
    server's greedy tokens for `checks`)."""
    levels, reference = {}, None
    for scheduler in SCHEDULERS[:1] if args.without_static else SCHEDULERS:
        cache = scratch / f"compile_cache_{name}_{scheduler}"
        with serve.server_process(model_dir, _flags(scheduler, cache, args)) as (url, ready, pid):
            print(f"{name}, {scheduler}: ready in {ready:.1f} s (empty cache)", flush=True)
            _await_store(cache)
            bench.settings[f"ready_s {name} {scheduler}"] = ready
            if scheduler == "continuous":
                reference = _greedy_tokens(url, checks)
            levels[scheduler] = _levels(bench, name, scheduler, url, pid, rates, sentences, args)
    return levels, reference


def _peer(
    bench,
    name,
    model_dir: Path,
    vocab: Path,
    scratch: Path,
    rates,
    sentences,
    checks,
    reference,
    args,
) -> list[dict] | None:
    """CTranslate2's server on the same weights at every rate (None without ctranslate2)."""
    vocab_size = json.loads((model_dir / "config.json").read_text())["vocab_size"]
    ct2_dir = decode.ct2_model(model_dir, vocab_size, scratch / f"ct2_{name}")
    if ct2_dir is None:
        print(f"{name}, {PEER}: {decode.CT2_MISSING}; its row is skipped", flush=True)
        return None
    command = [
        sys.executable, str(PEER_SERVER), "--model", str(ct2_dir), "--spm", str(vocab),
        "--max_batch_size", str(args.max_batch_size),
        "--max_input_length", str(MAX_INPUT_LENGTH),
    ]  # fmt: skip
    with serve.http_server(command) as (url, ready, pid):
        print(f"{name}, {PEER}: ready in {ready:.1f} s", flush=True)
        bench.settings[f"ready_s {name} {PEER}"] = ready
        same = _greedy_tokens(url, checks) == reference
        bench.settings[f"same_greedy_tokens {name} {PEER}"] = same
        print(
            f"{name}: {PEER}'s greedy tokens {'are' if same else 'are NOT'} t5forge's for "
            f"{len(checks)} inputs (one cut to {MAX_INPUT_LENGTH} tokens), {CHECK_NEW_TOKENS} "
            "new tokens each",
            flush=True,
        )
        return _levels(bench, name, PEER, url, pid, rates, sentences, args)


def _compare(bench, name: str, rates: list[float], levels: dict) -> None:
    """Continuous batching against static batching and the peer, rate by rate."""
    for index, rate in enumerate(rates):
        row = f"serve_load {name}, {rate:g} requests/s offered"
        sides = {side: f"{name}, {side}, {rate:g} requests/s offered" for side in levels}
        runs = [summaries[index] for summaries in levels.values()]
        # Completed requests/s is what the offered load allows (every side keeps up at low
        # rates); the 99th-percentile latency is where the schedulers differ. A level where
        # no request completed has no p99.
        every_p99 = all(run["p99_ms"] for run in runs)
        metrics = ("throughput", "p99_ms") if every_p99 else ("throughput",)
        for metric in metrics:
            labelled = row + (", p99 latency" if metric == "p99_ms" else "")
            if "static" in sides:
                bench.compare(labelled, sides["continuous"], sides["static"], metric, "static")
            if PEER in sides:
                bench.compare(labelled, sides["continuous"], sides[PEER], metric, PEER)
            else:
                bench.peer_missing(labelled, sides["continuous"], PEER, decode.CT2_MISSING, metric)
        if every_p99:
            shown = {
                key: "/".join(format(run[key], form) for run in runs)
                for key, form in (("throughput", ".2f"), ("p99_ms", ".0f"), ("p50_ttft_ms", ".0f"))
            }
            print(
                f"  {rate:g}/s: {'/'.join(levels)} requests/s {shown['throughput']}, p99 "
                f"latency {shown['p99_ms']} ms, p50 TTFT {shown['p50_ttft_ms']} ms",
                flush=True,
            )


def _model(bench, name: str, model_dir: Path, vocab: Path, scratch: Path, rates, sentences, args):
    """Every side at every rate for one model; {side: [level summaries]}."""
    checks = [sentences[0], " ".join(sentences[:10])]  # the second is cut to MAX_INPUT_LENGTH
    levels, reference = _schedulers(bench, name, model_dir, scratch, rates, sentences, checks, args)
    peer = _peer(bench, name, model_dir, vocab, scratch, rates, sentences, checks, reference, args)
    if peer is not None:
        levels[PEER] = peer
    _compare(bench, name, rates, levels)
    return levels


def _plot(levels: dict, rates: dict, label: str, path: Path) -> None:
    """Per model: each side's completed requests/s, p99 latency and p50 TTFT against the
    offered load."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = (("throughput", "completed requests/s"), ("p99_ms", "p99 latency (ms)"),
              ("p50_ttft_ms", "p50 time to first token (ms)"))  # fmt: skip
    figure, axes = plt.subplots(
        len(levels), len(panels), figsize=(13, 3.4 * len(levels)), squeeze=False
    )
    for row, (model, schedulers) in enumerate(levels.items()):
        for column, (key, title) in enumerate(panels):
            axis = axes[row][column]
            for scheduler, runs in schedulers.items():
                axis.plot(rates[model], [r[key] for r in runs], "o-", label=scheduler)
            if key == "throughput":
                axis.plot(rates[model], rates[model], ":", color="grey", label="offered")
            axis.set_xlabel("offered requests/s")
            axis.set_title(f"{model}: {title}", fontsize=9)
            axis.legend(fontsize=7)
    sides = next(iter(levels.values()), {})
    figure.suptitle(
        f"t5forge serve ({', '.join(side for side in sides if side != PEER)}) and CTranslate2 "
        f"behind FastAPI, open-loop Poisson "
        f"arrivals, {MIN_NEW_TOKENS}-{MAX_NEW_TOKENS} new tokens ({label})",
        fontsize=9,
    )
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)


def main() -> int:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--models", nargs="+", default=list(serve.MODELS), choices=serve.MODELS)
    parser.add_argument(
        "--rates", nargs="+", type=float, help="offered requests/s (default: per model, RATES)"
    )
    parser.add_argument("--seconds", type=float, default=60, help="arrivals per level, seconds")
    parser.add_argument(
        "--repeats", type=int, default=3, help="windows per level (medians, spread printed)"
    )
    parser.add_argument("--timeout", type=float, default=300, help="a request's longest wait")
    parser.add_argument("--max_batch_size", type=int, default=32, help="decode slots / batch")
    parser.add_argument("--seed", type=int, default=0, help="of the arrivals and lengths")
    parser.add_argument(
        "--without_static",
        action="store_true",
        help="leave static batching out (continuous is the side compared with the peer; this "
        "saves a third of the run)",
    )
    parser.add_argument("--plot", type=Path, default=PLOT)
    parser.add_argument(
        "--startup_models",
        nargs="*",
        default=["demo"],
        choices=serve.MODELS,
        help="models whose default-settings start-up is timed (first start and restarts)",
    )
    parser.add_argument("--restarts", type=int, default=5, help="timed restarts per model")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a check that it runs: demo model, 2 and 8 requests/s, 15 s each, results and "
        "plot under /tmp unless given",
    )
    harness.add_arguments(parser, "serve_load")
    args = parser.parse_args()
    if args.quick:
        given = set(sys.argv[1:])
        if "--models" not in given:
            args.models = ["demo"]
        if "--rates" not in given:
            args.rates = [2.0, 8.0]
        if "--seconds" not in given:
            args.seconds = 15
        if "--results" not in given:
            args.results = Path("/tmp/serve_load.json")
        if "--plot" not in given:
            args.plot = Path("/tmp/serve_load.png")
        if "--settle_seconds" not in given:
            args.settle_seconds = 0
        if "--restarts" not in given:
            args.restarts = 1
        if "--repeats" not in given:
            args.repeats = 1

    bench = harness.Benchmark.from_args("serve_load", args)
    sentences = serve.validation_sentences()
    rates = {name: args.rates or RATES[name] for name in args.models}
    levels = {}
    with tempfile.TemporaryDirectory() as scratch:
        vocab = serve.vocabulary(Path(scratch))
        for name in args.models:
            print(f"{name}: {serve.MODELS[name]}", flush=True)
            model_dir = serve.write_model(name, Path(scratch), vocab)
            if name in args.startup_models:
                serve_startup.time_startups(bench, name, model_dir, Path(scratch), args.restarts)
            levels[name] = _model(
                bench, name, model_dir, vocab, Path(scratch), rates[name], sentences, args
            )
    bench.finish()
    label = harness.SHARED_LABEL if bench.shared else "idle CPU"
    _plot(levels, rates, label, args.plot)
    print(f"wrote {args.plot}; results in {args.results}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
