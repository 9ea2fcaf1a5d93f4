"""GFLOP/s of the compiled oneDNN products (t5forge.models.native_products) beside XLA's best
forms of the same product and PyTorch's, on this machine's CPU (docs/cpu-kernels.md).

Rows, for each --shapes entry M,K,N:
- bf16 forward, x[M,K] @ w[K,N]: XLA's plain dot (bf16 out), XLA's fast form (float32
  accumulation, cast back), the extension (bf16 and float32 out), torch's `x @ w`;
- bf16 weight gradient, x[K,M]^T @ g[K,N] (the backward's form): XLA's transposed-operand dot
  with float32 accumulation, XLA behind a materialised transpose, the extension in one call
  (contract_a=0), torch's `x.t() @ g`;
- int8, x[M,K] @ w[K,N] -> int32: XLA's integer dot, the extension (scaled, float32 out; its
  weights plain and packed once), and torch._int_mm.
PyTorch runs in a process of its own (benchmarks/isolated.py: two OpenMP runtimes in one
process disturb each other) and times its calls there, after the other sides. Timing and the results file are benchmarks/harness.py's.

Smoke run:   python benchmarks/native_products.py --shapes 256,256,256 --settle_seconds 0
Idle run:    python benchmarks/native_products.py --runs 7
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import harness  # noqa: E402  (same directory)
from isolated import IsolatedSide  # noqa: E402  (same directory)

# T5 1.1 small's widest weight gradient (d_model 512 x d_ff 1024 over batch 8 x 512 tokens)
# beside the square product.
DEFAULT_SHAPES = ["2048,2048,2048", "512,4096,1024"]
FORM_LABELS = {
    "forward": "bf16 forward",
    "weight_gradient": "bf16 weight gradient x^T g",
    "int8": "int8 x int8",
}


def operands(m: int, k: int, n: int) -> dict[str, np.ndarray]:
    """The same random operands for every side (float32 here; each side casts)."""
    rng = np.random.default_rng(0)
    return {
        "x": rng.standard_normal((m, k), np.float32),
        "w": rng.standard_normal((k, n), np.float32),
        "x_t": rng.standard_normal((k, m), np.float32),
        "x_q": rng.integers(-128, 128, (m, k), np.int8),
        "w_q": rng.integers(-128, 128, (k, n), np.int8),
    }


def torch_side(m: int, k: int, n: int):
    """PyTorch's product of one form, timed inside its worker: `run(form, repeats)` gives
    (wall seconds, CPU seconds) per call after a warm-up, so the pipe's round trip (tens of ms
    on a busy machine) is not counted."""
    import torch

    torch.set_num_threads(os.cpu_count())
    data = {name: torch.from_numpy(value) for name, value in operands(m, k, n).items()}
    x, w, x_t = (data[name].bfloat16() for name in ("x", "w", "x_t"))
    calls = {
        "forward": lambda: x @ w,
        "weight_gradient": lambda: x_t.t() @ w,
        "int8": lambda: torch._int_mm(data["x_q"], data["w_q"]),
    }

    def run(form, repeats):
        samples = harness.Samples()
        calls[form]()
        for _ in range(repeats):
            wall, cpu = time.perf_counter(), time.process_time()
            calls[form]()
            samples.seconds.append(time.perf_counter() - wall)
            samples.cpu_seconds.append(time.process_time() - cpu)
        return samples.seconds, samples.cpu_seconds

    return run


def jax_sides(m: int, k: int, n: int) -> dict[str, dict]:
    """form -> side name -> zero-argument call, each returning a ready jax array."""
    import jax
    import jax.numpy as jnp

    from t5forge.models import native_products

    data = {name: jnp.asarray(value) for name, value in operands(m, k, n).items()}
    x, w, x_t = (data[name].astype(jnp.bfloat16) for name in ("x", "w", "x_t"))
    x_q, w_q = data["x_q"], data["w_q"]
    ones_m, ones_n = jnp.ones((m,), jnp.float32), jnp.ones((n,), jnp.float32)
    f32 = jnp.float32
    contract_0 = (((0,), (0,)), ((), ()))

    def ready(fn, *args):
        compiled = jax.jit(fn)
        return lambda: compiled(*args).block_until_ready()

    forms = {
        "forward": {
            "XLA bf16 dot": ready(jnp.dot, x, w),
            "XLA f32-accumulate, cast": ready(
                lambda x, w: jnp.dot(x, w, preferred_element_type=f32).astype(jnp.bfloat16), x, w
            ),
        },
        "weight_gradient": {
            "XLA transposed operand": ready(
                lambda a, g: jax.lax.dot_general(a, g, contract_0, preferred_element_type=f32),
                x_t,
                w,
            ),
            "XLA materialised transpose": ready(
                lambda a, g: jnp.dot(
                    jax.lax.optimization_barrier(a.T), g, preferred_element_type=f32
                ),
                x_t,
                w,
            ),
        },
        "int8": {
            "XLA int8 dot": ready(
                lambda a, b: jnp.dot(a, b, preferred_element_type=jnp.int32), x_q, w_q
            )
        },
    }
    if native_products.bf16_products_here():
        bf16 = native_products.bf16_matmul
        forms["forward"]["oneDNN bf16 out"] = ready(
            lambda x, w: bf16(x, w, contract_a=1, contract_b=0, out_dtype=jnp.bfloat16), x, w
        )
        forms["forward"]["oneDNN f32 out"] = ready(
            lambda x, w: bf16(x, w, contract_a=1, contract_b=0, out_dtype=f32), x, w
        )
        forms["weight_gradient"]["oneDNN one call"] = ready(
            lambda a, g: bf16(a, g, contract_a=0, contract_b=0, out_dtype=f32), x_t, w
        )
    if native_products.int8_products_here():
        int8 = native_products.int8_matmul
        forms["int8"]["oneDNN int8, scaled"] = ready(
            lambda a, xs, b, ws: int8(a, xs, b, ws, f32), x_q, ones_m, w_q, ones_n
        )
        forms["int8"]["oneDNN int8, packed weights"] = ready(
            lambda a, xs, b, ws: int8(a, xs, b, ws, f32),
            x_q,
            ones_m,
            native_products.pack_int8_weights(w_q),
            ones_n,
        )
    return forms


def agreement(outputs: dict) -> float:
    """Largest difference between the sides' results over the largest magnitude."""
    arrays = [np.asarray(out, np.float32) for out in outputs.values() if out is not None]
    scale = max(float(np.abs(arrays[0]).max()), 1.0)
    return max(float(np.abs(a - arrays[0]).max()) for a in arrays) / scale


def measure(bench: harness.Benchmark, shape: str, runs: int) -> None:
    from t5forge.models import native_products

    m, k, n = (int(size) for size in shape.split(","))
    size = f"{m}x{k}x{n}"
    torch = IsolatedSide("native_products:torch_side", m=m, k=k, n=n)
    try:
        for form, sides in jax_sides(m, k, n).items():
            row = f"{FORM_LABELS[form]}, {size}"
            print(row, flush=True)
            calls = {f"{row}: {name}": call for name, call in sides.items()}
            work = 2 * m * k * n / 1e9
            outputs = bench.run(calls, runs, work=work, unit="GFLOP/s")
            torch_name = f"{row}: torch"
            seconds, cpu_seconds = torch(form=form, repeats=runs)
            bench.record(torch_name, harness.Samples(seconds, cpu_seconds), work, "GFLOP/s")
            print(f"  results agree to {agreement(outputs):.1e} (relative)", flush=True)
            ours = [name for name in calls if "oneDNN" in name]
            xla = [name for name in calls if ": XLA" in name]
            best_xla = max(xla, key=lambda name: bench.sides[name]["throughput"])
            for side in ours:
                bench.compare(row, side, best_xla, peer_label="XLA's best form")
                bench.compare(row, side, torch_name, peer_label="PyTorch")
            if not ours:
                bench.peer_missing(
                    row, "oneDNN", best_xla, "t5forge_kernels not built, or no exact product here"
                )
    finally:
        torch.close()
    print(f"oneDNN {native_products.onednn_version()}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", nargs="+", default=DEFAULT_SHAPES, help="M,K,N entries")
    parser.add_argument("--runs", type=harness.repeats, default=harness.MIN_REPEATS)
    harness.add_arguments(parser, "native_products")
    args = parser.parse_args()
    bench = harness.Benchmark.from_args("native_products", args)
    for shape in args.shapes:
        measure(bench, shape, args.runs)
    bench.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
