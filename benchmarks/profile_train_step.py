"""Where one compiled train step spends its time, by suspect (issue 36's bf16 profile).

Runs t5forge's real Trainer (AdamW) on one device, traces --steps steps with jax.profiler, and
sums the time of every op XLA:CPU ran (its thunks: fusions, YNNPACK dots, oneDNN custom calls)
over all of XLA's threads: CPU-milliseconds per step, so ops running side by side both count.
Each op is named by the optimized HLO (`compiled.as_text()`): its shape, kind and the jax
source path in its metadata (or the commonest one inside a fusion), and sorted into the
suspects of docs/cpu-products.md (the dense products forward and backward, attention's einsums
and softmax, the MLP's activation, the 32k-vocab logits and loss, the norms, the optimizer,
the master-weight casts...). --top lists the single most expensive ops with their HLO. It
measures why a step costs what it does, not how fast it is: on a shared CPU the shares hold
better than the milliseconds.

    .venv/bin/python benchmarks/profile_train_step.py --dtype bfloat16 --top 20
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import sys
import tempfile
import time
from pathlib import Path

import jax
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from t5forge.models.model import build_model  # noqa: E402
from t5forge.models.presets import get_config  # noqa: E402
from t5forge.training import optimizers, partitioning  # noqa: E402
from t5forge.training.trainer import Trainer, metrics_to_host  # noqa: E402

# (suspect, test of an op's (shape, kind, source path, vocabulary size)), first match wins.
SUSPECTS = (
    ("logits layer products (32k vocab)", lambda s, k, p, v: "logits_dense" in p),
    ("argmax over the vocab (accuracy)", lambda s, k, p, v: s.startswith("(") and "reduce" in p),
    ("softmax cross-entropy over the vocab", lambda s, k, p, v: f"{v}]" in s or f"[{v}," in s),
    ("embedding gradient (scatter-add)", lambda s, k, p, v: "scatter" in k or "scatter" in p),
    ("relative position bias gradient", lambda s, k, p, v: "._bias/" in p),
    ("weight gradients (oneDNN custom calls)", lambda s, k, p, v: k.startswith("custom-call")),
    ("attention einsums", lambda s, k, p, v: "ynn" in k and "_attend/dot_general" in p),
    ("attention softmax, q/k/v layout and their gradients", lambda s, k, p, v: "_attend" in p),
    ("dense products forward", lambda s, k, p, v: "ynn" in k and "transpose(" not in p),
    ("dense products' input gradients", lambda s, k, p, v: "ynn" in k),
    ("q/k/v projection split and its gradient", lambda s, k, p, v: "._heads/" in p),
    ("MLP activation (gated GELU) and its gradient", lambda s, k, p, v: "/mlp/" in p),
    ("RMS norms", lambda s, k, p, v: "norm" in p),
    (
        "optimizer update and finiteness checks",
        lambda s, k, p, v: (
            s.startswith("pred") or any(w in p for w in ("adam", "apply_gradients", "is_finite"))
        ),
    ),
    ("master-weight casts", lambda s, k, p, v: "convert_element_type" in p),
    # Copies with no source path: the transposes products.py puts behind barriers.
    ("layout copies around the products", lambda s, k, p, v: k == "fusion" and not p),
)
# Ops whose time is the time of the ops they run, which the trace holds too.
CONTROL_FLOW = ("conditional", "while", "call")
_INSTRUCTION = re.compile(
    r"^\s*(?:ROOT )?%?([\w.\-]+) = (\(.*?\)|\S+) ([\w-]+)\((.*)$", re.MULTILINE
)
_COMPUTATION = re.compile(r"^%?([\w.\-]+) [^\n]*-> [^\n]*\{\n(.*?)\n\}", re.MULTILINE | re.DOTALL)


def _source(text: str) -> str:
    return re.search(r'op_name="([^"]*)"', text).group(1) if 'op_name="' in text else ""


def hlo_ops(hlo: str) -> dict[str, tuple[str, str, str]]:
    """{instruction: (shape, kind, jax source path)} of an optimized HLO module's text; a
    fusion without a path of its own gets the commonest path of the instructions it fuses."""
    bodies = {m.group(1): m.group(2) for m in _COMPUTATION.finditer(hlo)}
    ops = {}
    for name, shape, opcode, rest in _INSTRUCTION.findall(hlo):
        kind = re.search(r'"kind":"(\w+)"', rest)
        path = _source(rest)
        called = re.search(r"calls=%([\w.\-]+)", rest)
        if not path and called and called.group(1) in bodies:
            inner = re.findall(r'op_name="([^"]*)"', bodies[called.group(1)])
            path = collections.Counter(inner).most_common(1)[0][0] if inner else ""
        ops[name] = (shape, opcode + (f"/{kind.group(1)}" if kind else ""), path)
    return ops


def suspect_of(shape: str, kind: str, path: str, vocab: int) -> str:
    return next((name for name, test in SUSPECTS if test(shape, kind, path, vocab)), "other")


def op_times(xspace: Path, names) -> collections.Counter:
    """{op name: nanoseconds} of the ops `names` (the HLO's instructions) in a jax.profiler
    trace, summed over every thread that ran them (XLA's pool and the client's own thread)."""
    times = collections.Counter()
    for plane in jax.profiler.ProfileData.from_file(str(xspace)).planes:
        for line in plane.lines:
            for event in line.events:
                if event.name in names:
                    times[event.name] += event.duration_ns
    return times


def synthetic_batch(vocab: int, batch: int, inputs: int, targets: int) -> dict:
    rng = np.random.default_rng(0)
    target_tokens = rng.integers(3, vocab, (batch, targets), np.int32)
    return {
        "encoder_input_tokens": rng.integers(3, vocab, (batch, inputs), np.int32),
        "decoder_input_tokens": np.pad(target_tokens[:, :-1], ((0, 0), (1, 0))),
        "decoder_target_tokens": target_tokens,
        "decoder_loss_weights": np.ones_like(target_tokens, np.float32),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="t5_1_1/small")
    parser.add_argument("--dtype", default="bfloat16", choices=("float32", "bfloat16"))
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--input_length", type=int, default=512)
    parser.add_argument("--target_length", type=int, default=114)
    parser.add_argument("--steps", type=int, default=2, help="traced steps")
    parser.add_argument("--top", type=int, default=0, help="also list this many single ops")
    args = parser.parse_args()

    config = get_config(args.config, dtype=args.dtype, dropout_rate=0.0)
    model = build_model(config)
    trainer = Trainer(
        model,
        optimizers.adamw(1e-4),
        partitioning.PjitPartitioner(devices=jax.devices()[:1]),
    )
    state = trainer.state_from_params(model.init_params(jax.random.PRNGKey(0)))
    batch = synthetic_batch(config.vocab_size, args.batch, args.input_length, args.target_length)
    ops = hlo_ops(trainer.compile_train_step(state, batch).as_text())
    for _ in range(2):  # compile, then one step at speed
        state, metrics = trainer.train_step(state, batch)
        metrics_to_host(metrics)
    with tempfile.TemporaryDirectory(prefix="t5forge-profile-train-") as trace_dir:
        start = time.perf_counter()
        jax.profiler.start_trace(trace_dir)
        for _ in range(args.steps):
            state, metrics = trainer.train_step(state, batch)
            metrics_to_host(metrics)
        jax.profiler.stop_trace()
        wall = (time.perf_counter() - start) / args.steps
        timed = {name for name, (_, kind, _) in ops.items() if kind not in CONTROL_FLOW}
        times = op_times(next(Path(trace_dir).rglob("*.xplane.pb")), timed)

    per_step = {op: ns / args.steps / 1e6 for op, ns in times.items()}
    groups = collections.Counter()
    for op, ms in per_step.items():
        groups[suspect_of(*ops[op], config.vocab_size)] += ms
    total = sum(groups.values())
    print(
        f"{args.config} {args.dtype}, batch {args.batch}, {args.input_length}/"
        f"{args.target_length}, AdamW, {args.steps} traced steps | {wall:.2f} s per step wall "
        f"(traced), {total:.0f} CPU-ms of ops per step | load {os.getloadavg()[0]:.2f}, "
        f"{os.cpu_count()} cores | jax {jax.__version__}"
    )
    print("| suspect | CPU-ms per step | share |\n|---|---:|---:|")
    for name, ms in groups.most_common():
        print(f"| {name} | {ms:,.1f} | {ms / total:.1%} |")
    if args.top:
        print(f"\nthe {args.top} most expensive ops (CPU-ms per step, shape, kind, source):")
        for op, ms in sorted(per_step.items(), key=lambda item: -item[1])[: args.top]:
            shape, kind, path = ops[op]
            print(f"  {ms:8.1f}  {op}  {kind}  {shape}  {path.split(')/', 1)[-1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
