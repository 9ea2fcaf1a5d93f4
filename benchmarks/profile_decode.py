"""Where one `Model.generate` spends its time, on whatever device jax has (CPU or GPU).

Prints (1) the wall time of a generate at a few lengths, from which a fixed cost and a cost
per decoding step follow; (2) how many compilations ran during the timed calls (there should
be none: a compile per call would be the whole cost); (3) with --stepwise, the same for the
server's decoder (t5forge.serving.stepwise), which runs each step as a program of its own
from a host loop: a step that costs far less there than inside generate's one-program
`while_loop` puts the cost in the loop's machinery, not in the step's computation; (4) the
ops that took the most time in a jax.profiler trace of one generate, summed by op name over
the trace's tracks, and each track's total (op time far below the wall time means the device
waited on the host). It is the first thing to run when a decoding figure looks wrong: it
measures why, not how fast. --json writes every figure for benchmarks/gpu_session.py.

    .venv/bin/python benchmarks/profile_decode.py --config t5_1_1/large --dtype bfloat16 \
        --batch 32 --trace_dir /tmp/trace
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import same_weights  # noqa: E402  (same directory)

COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"


def op_totals(trace_path: Path) -> dict[tuple[str, str], list[float]]:
    """{(track, op name): [total milliseconds, calls]} of a perfetto trace.

    Python-level tracks (the host's Python calls) are left out: only what the runtime ran."""
    trace = json.loads(gzip.open(trace_path).read())
    names = {
        event["pid"]: event["args"]["name"]
        for event in trace["traceEvents"]
        if event.get("ph") == "M" and event.get("name") == "process_name"
    }
    totals: dict[tuple[str, str], list[float]] = collections.defaultdict(lambda: [0.0, 0])
    for event in trace["traceEvents"]:
        if event.get("ph") != "X" or "dur" not in event:
            continue
        track = names.get(event.get("pid"), str(event.get("pid")))
        if "python" in track.lower() or event["name"].startswith(("$", "<")):
            continue
        total = totals[track, event["name"]]
        total[0] += event["dur"] / 1000
        total[1] += 1
    return totals


def top_ops(trace_path: Path, count: int) -> list[tuple[str, str, float, int]]:
    """(track, op, total milliseconds, calls) of a perfetto trace's longest ops, by op name."""
    ranked = sorted(op_totals(trace_path).items(), key=lambda item: -item[1][0])[:count]
    return [(track, name, ms, int(calls)) for (track, name), (ms, calls) in ranked]


def track_totals(trace_path: Path) -> dict[str, float]:
    """Milliseconds of ops per track (nested ops count twice: an upper bound of busy time)."""
    totals: dict[str, float] = collections.defaultdict(float)
    for (track, _), (ms, _) in op_totals(trace_path).items():
        totals[track] += ms
    return dict(sorted(totals.items(), key=lambda item: -item[1]))


def timed_lengths(name: str, call, lengths: list[int], runs: int, compiles: list) -> dict:
    """{new tokens: median seconds} of `call(new_tokens)` after an untimed first call, printed
    with the compilations that ran during the timed calls; then the fixed and per-step cost."""
    medians, during = {}, {}
    for new_tokens in lengths:
        start = time.perf_counter()
        call(new_tokens)
        first, before = time.perf_counter() - start, len(compiles)
        seconds = []
        for _ in range(runs):
            start = time.perf_counter()
            call(new_tokens)
            seconds.append(time.perf_counter() - start)
        medians[new_tokens], during[new_tokens] = statistics.median(seconds), len(compiles) - before
        print(
            f"  {name}, {new_tokens:4d} new tokens: first call {first:.2f} s, median "
            f"{medians[new_tokens]:.3f} s of {runs}, {during[new_tokens]} compilations during them",
            flush=True,
        )
    result = {"median_s": medians, "compiles_during_timed_calls": during}
    if len(medians) > 1:
        (short, short_s), (long, long_s) = min(medians.items()), max(medians.items())
        step = (long_s - short_s) / (long - short)
        result.update(step_ms=step * 1000, fixed_s=short_s - step * short)
        print(f"  {name}: per decoding step {step * 1000:.2f} ms, fixed {result['fixed_s']:.3f} s")
    return result


def stepwise_decode(model, rows: np.ndarray):
    """A greedy decode of `rows` through the server's step decoder (one program per step,
    driven from the host): the call timed_lengths times."""
    from t5forge.serving.stepwise import RowOptions, StepDecoder

    decoder = StepDecoder(model.t5x_model)
    features = {"encoder_input_tokens": rows}

    def decode(new_tokens):
        options = [RowOptions(max_new_tokens=new_tokens)] * len(rows)
        return decoder.decode(model.params, features, new_tokens, options)

    return decode


def main() -> int:
    from t5forge.models.weights_dtype import WEIGHTS_DTYPES

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="t5_1_1/small")
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    parser.add_argument(
        "--weights_dtype",
        default=None,
        choices=WEIGHTS_DTYPES,
        help="the Dense kernels' dtype (Model.set_weights_dtype), as decode.py's rows "
        "(default: --dtype's)",
    )
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--input_length", type=int, default=128)
    parser.add_argument("--lengths", default="8,64", help="new-token counts to time")
    parser.add_argument("--method", default="greedy", choices=("greedy", "beam"))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--trace_dir", type=Path, default=None)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument(
        "--stepwise", action="store_true", help="also time the server's one-step-per-call decoder"
    )
    parser.add_argument("--json", type=Path, default=None, help="write every figure here")
    args = parser.parse_args()

    import jax
    import jax.numpy as jnp

    from t5forge.api import Model
    from t5forge.models.model import build_model
    from t5forge.models.presets import get_config

    compiles = []
    jax.monitoring.register_event_duration_secs_listener(
        lambda event, seconds, **_: compiles.append(seconds) if event == COMPILE_EVENT else None
    )
    config = get_config(args.config, dtype=args.dtype)
    params = same_weights.never_eos(build_model(config).init_params(jax.random.PRNGKey(0)))
    model = Model(config, jax.tree.map(lambda p: p.astype(jnp.dtype(args.dtype)), params))
    if args.weights_dtype is not None:  # else the kernels stay in --dtype
        model.set_weights_dtype(args.weights_dtype)
    rows = np.random.default_rng(0).integers(
        3, config.vocab_size, (args.batch, args.input_length), np.int32
    )
    print(
        f"{args.config} {args.dtype}, {args.weights_dtype or args.dtype} weights, "
        f"batch {args.batch}, "
        f"{args.method} on {jax.devices()[0]}"
    )

    def generate(new_tokens):
        return model.generate(rows, max_length=new_tokens, method=args.method, alpha=0.0)

    lengths = [int(n) for n in args.lengths.split(",")]
    report = {
        "config": args.config,
        "dtype": args.dtype,
        "weights_dtype": args.weights_dtype or args.dtype,
        "batch": args.batch,
        "input_length": args.input_length,
        "method": args.method,
        "device": str(jax.devices()[0]),
        "generate": timed_lengths("generate", generate, lengths, args.runs, compiles),
    }
    if args.stepwise:
        report["stepwise"] = timed_lengths(
            "stepwise", stepwise_decode(model, rows), lengths, args.runs, compiles
        )
    report["compiles"] = len(compiles)
    print(f"  {len(compiles)} compilations in all (the first calls compile)")
    if args.trace_dir is not None:
        new_tokens = max(lengths)
        with jax.profiler.trace(str(args.trace_dir), create_perfetto_trace=True):
            generate(new_tokens)
        trace = max(args.trace_dir.rglob("perfetto_trace.json.gz"), key=lambda p: p.stat().st_mtime)
        print(f"  top ops of one {new_tokens}-token generate ({trace}):")
        report["top_ops"] = top_ops(trace, args.top)
        for track, name, ms, calls in report["top_ops"]:
            print(f"    {ms:9.2f} ms {calls:6d} calls  {track[:30]:30s} {name[:90]}")
        report["track_ms"] = track_totals(trace)
        for track, ms in list(report["track_ms"].items())[:6]:
            print(f"    track {track[:60]}: {ms:.1f} ms of ops")
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
