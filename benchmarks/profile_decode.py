"""Where one `Model.generate` spends its time, on whatever device jax has (CPU or GPU).

Prints (1) the wall time of a generate at a few lengths, from which a fixed cost and a cost
per decoding step follow; (2) how many compilations ran during the timed calls (there should
be none: a compile per call would be the whole cost); (3) the ops that took the most time in
a jax.profiler trace of one generate, summed by op name over the trace's tracks. It is the
first thing to run when a decoding figure looks wrong: it measured why, not how fast.

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


def top_ops(trace_path: Path, count: int) -> list[tuple[str, str, float, int]]:
    """(track, op, total milliseconds, calls) of a perfetto trace's longest ops, by op name.

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
    ranked = sorted(totals.items(), key=lambda item: -item[1][0])[:count]
    return [(track, name, ms, int(calls)) for (track, name), (ms, calls) in ranked]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="t5_1_1/small")
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--input_length", type=int, default=128)
    parser.add_argument("--lengths", default="8,64", help="new-token counts to time")
    parser.add_argument("--method", default="greedy", choices=("greedy", "beam"))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--trace_dir", type=Path, default=None)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()

    import jax
    import jax.numpy as jnp

    from t5forge.api import Model
    from t5forge.models.configs import get_config
    from t5forge.models.model import build_model

    compiles = []
    jax.monitoring.register_event_duration_secs_listener(
        lambda event, seconds, **_: compiles.append(seconds) if event == COMPILE_EVENT else None
    )
    config = get_config(args.config, dtype=args.dtype)
    params = same_weights.never_eos(build_model(config).init_params(jax.random.PRNGKey(0)))
    model = Model(config, jax.tree.map(lambda p: p.astype(jnp.dtype(args.dtype)), params))
    rows = np.random.default_rng(0).integers(
        3, config.vocab_size, (args.batch, args.input_length), np.int32
    )
    print(f"{args.config} {args.dtype}, batch {args.batch}, {args.method} on {jax.devices()[0]}")

    def generate(new_tokens):
        return model.generate(rows, max_length=new_tokens, method=args.method, alpha=0.0)

    medians = {}
    for new_tokens in map(int, args.lengths.split(",")):
        start = time.perf_counter()
        generate(new_tokens)
        first, before = time.perf_counter() - start, len(compiles)
        seconds = []
        for _ in range(args.runs):
            start = time.perf_counter()
            generate(new_tokens)
            seconds.append(time.perf_counter() - start)
        medians[new_tokens] = statistics.median(seconds)
        print(
            f"  {new_tokens:4d} new tokens: first call {first:.2f} s, median {medians[new_tokens]:.3f} "
            f"s of {args.runs}, {len(compiles) - before} compilations during them"
        )
    print(f"  {len(compiles)} compilations in all (the first calls compile)")
    if len(medians) > 1:
        (short, short_s), (long, long_s) = min(medians.items()), max(medians.items())
        step = (long_s - short_s) / (long - short)
        print(f"  per decoding step {step * 1000:.2f} ms, fixed {short_s - step * short:.3f} s")
    if args.trace_dir is not None:
        new_tokens = max(medians)
        with jax.profiler.trace(str(args.trace_dir), create_perfetto_trace=True):
            generate(new_tokens)
        trace = max(args.trace_dir.rglob("perfetto_trace.json.gz"), key=lambda p: p.stat().st_mtime)
        print(f"  top ops of one {new_tokens}-token generate ({trace}):")
        for track, name, ms, calls in top_ops(trace, args.top):
            print(f"    {ms:9.2f} ms {calls:6d} calls  {track[:30]:30s} {name[:90]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
