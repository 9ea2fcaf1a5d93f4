"""Which form of an int8 product XLA:CPU runs fastest: the measurement behind
quantized.xla_int8_matmul.

Each form multiplies [rows, 512] by 24 distinct [512, 2048] kernels in one scanned program (a
decoding step's weights do not stay in cache either) and reports microseconds per product, for
rows 1, 8 and 32 (decoding steps: batch 1, batch 8, beam 4 x batch 8) and 1024 (an encoder pass
over 8 x 128 tokens):

- float32: the kernels as trained;
- bfloat16 weights: bfloat16 operands, float32 sums (weights_dtype='bfloat16');
- int8 x int8 -> int32: XLA's int8 dot, input quantised per row;
- int8 via bfloat16: the same int8 operands widened exactly to bfloat16, float32 sums
  (quantized.xla_int8_matmul, what t5forge runs);
- int8 weights only: bfloat16 input, int8 kernel widened to bfloat16 (no input quantisation).

    .venv/bin/python benchmarks/int8_products.py
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from harness import machine  # noqa: E402  (same directory)

from t5forge.models.quantized import quantize_kernel, quantize_rows, xla_int8_matmul  # noqa: E402

KERNELS, IN, OUT = 24, 512, 2048
ROWS = (1, 8, 32, 1024)
REPEATS = 9


def int8_dot(x, w_q, w_scale):
    x_q, x_scale = quantize_rows(x)
    sums = jax.lax.dot(x_q, w_q, preferred_element_type=jnp.int32)
    return sums.astype(jnp.float32) * x_scale[:, None] * w_scale[None, :]


def bf16_weights(x, w):
    return jax.lax.dot(x.astype(jnp.bfloat16), w, preferred_element_type=jnp.float32)


def int8_weights_only(x, w_q, w_scale):
    return bf16_weights(x, w_q.astype(jnp.bfloat16)) * w_scale[None, :]


FORMS = {
    "float32": (lambda x, w: x @ w, "float32"),
    "bfloat16 weights": (bf16_weights, "bfloat16"),
    "int8 x int8 -> int32": (int8_dot, "int8"),
    "int8 via bfloat16": (
        lambda x, w_q, w_scale: xla_int8_matmul(*quantize_rows(x), w_q, w_scale, jnp.float32),
        "int8",
    ),
    "int8 weights only": (int8_weights_only, "int8"),
}


def over_kernels(product):
    """One program applying `product` to x and each kernel in turn (a scan over kernels)."""

    def run(x, *kernels):
        return jax.lax.scan(lambda _, kernel: (None, product(x, *kernel)[0, 0]), None, kernels)[1]

    return jax.jit(run)


def microseconds(program, *arguments) -> float:
    """Median microseconds per product after a compiling call."""
    jax.block_until_ready(program(*arguments))
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        jax.block_until_ready(program(*arguments))
        times.append(time.perf_counter() - start)
    return statistics.median(times) / KERNELS * 1e6


def main() -> int:
    rng = np.random.default_rng(0)
    kernels = rng.standard_normal((KERNELS, IN, OUT), np.float32) * 0.05
    quantized = [quantize_kernel(kernel) for kernel in kernels]
    stored = {
        "float32": (jnp.asarray(kernels),),
        "bfloat16": (jnp.asarray(kernels, jnp.bfloat16),),
        "int8": (
            jnp.stack([kernel.values for kernel in quantized]),
            jnp.stack([kernel.scale.reshape(-1) for kernel in quantized]),
        ),
    }
    print(
        f"{machine()['cpu']}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}, "
        f"jax {jax.__version__}: microseconds per [rows, {IN}] x [{IN}, {OUT}] product "
        f"(median of {REPEATS}, {KERNELS} kernels per program)"
    )
    print(f"  {'form':22s}" + "".join(f"{f'{rows} rows':>12s}" for rows in ROWS))
    inputs = {rows: jnp.asarray(rng.standard_normal((rows, IN), np.float32)) for rows in ROWS}
    for name, (product, kind) in FORMS.items():
        program = over_kernels(product)
        times = [microseconds(program, inputs[rows], *stored[kind]) for rows in ROWS]
        print(f"  {name:22s}" + "".join(f"{us:12.0f}" for us in times), flush=True)
    print(f"  load average after: {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
