"""Matrix-product forms on this CPU: GFLOP/s of XLA:CPU's forms, t5forge's products and PyTorch.

Which dot forms XLA:CPU runs fast decides how t5forge.models.products computes a product
(docs/cpu-products.md). For a square product and T5 1.1 small's training shapes (batch 8 x
512 tokens: the q/k/v, MLP-in and MLP-out projections) it times, medians of --repeats calls:

- the forward forms: float32; bfloat16 in and out; bfloat16 in, float32 out
  (preferred_element_type); the same cast back to bfloat16;
- every weight-gradient form tried for x^T @ grad (x [tokens, in], grad [tokens, out]);
- products.dense_product forward and forward + backward, float32 and bfloat16;
- PyTorch's same products (torch.matmul, and nn.functional.linear with autograd).

It prints the CPU model and the load average before and after: a loaded machine's numbers
are smoke only.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import harness  # noqa: E402  (same directory)

from t5forge.models import products  # noqa: E402

BF16, F32 = jnp.bfloat16, jnp.float32
ROWS_BY_COLUMNS = (((1,), (0,)), ((), ()))
LEADING_AXES = (((0,), (0,)), ((), ()))
barrier = jax.lax.optimization_barrier

# name -> f(a [M, K], b [K, N]) for a forward product.
FORWARD_FORMS = {
    "f32": lambda a, b: jax.lax.dot_general(a, b, ROWS_BY_COLUMNS),
    "bf16 -> bf16": lambda a, b: jax.lax.dot_general(a, b, ROWS_BY_COLUMNS),
    "bf16 -> f32": lambda a, b: jax.lax.dot_general(
        a, b, ROWS_BY_COLUMNS, preferred_element_type=F32
    ),
    "bf16 -> f32 -> bf16": lambda a, b: jax.lax.dot_general(
        a, b, ROWS_BY_COLUMNS, preferred_element_type=F32
    ).astype(BF16),
}
FORWARD_DTYPES = {"f32": F32}

# name -> f(x [T, in], g [T, out]) = x^T g [in, out], bfloat16 operands.
WEIGHT_GRADIENT_FORMS = {
    "leading axes, bf16 out (JAX's transpose)": lambda x, g: jax.lax.dot_general(
        x, g, LEADING_AXES
    ),
    "leading axes, f32 out": lambda x, g: jax.lax.dot_general(
        x, g, LEADING_AXES, preferred_element_type=F32
    ),
    "both upcast to f32": lambda x, g: jax.lax.dot_general(
        x.astype(F32), g.astype(F32), LEADING_AXES
    ),
    "(g^T x)^T, f32 out": lambda x, g: (
        jax.lax.dot_general(g, x, LEADING_AXES, preferred_element_type=F32).T
    ),
    "x^T copied behind a barrier, f32 out": lambda x, g: jax.lax.dot_general(
        barrier(jnp.copy(x.T)), g, ROWS_BY_COLUMNS, preferred_element_type=F32
    ),
    "x^T and g behind one barrier, f32 out": lambda x, g: jax.lax.dot_general(
        *barrier((x.T, g)), ROWS_BY_COLUMNS, preferred_element_type=F32
    ),
    "x^T behind a barrier with a unit axis, f32 out": lambda x, g: jax.lax.dot_general(
        barrier(x.T[..., None])[..., 0], g, ROWS_BY_COLUMNS, preferred_element_type=F32
    ),
    "x^T flattened behind a barrier, f32 out": lambda x, g: jax.lax.dot_general(
        barrier(x.T.reshape(-1)).reshape(x.shape[1], -1),
        g,
        ROWS_BY_COLUMNS,
        preferred_element_type=F32,
    ),
    "g^T behind a barrier with a unit axis, result^T": lambda x, g: (
        jax.lax.dot_general(
            barrier(g.T[..., None])[..., 0], x, ROWS_BY_COLUMNS, preferred_element_type=F32
        ).T
    ),
    "blocks of 8 as a batched dot, summed": lambda x, g: jax.lax.dot_general(
        barrier(x.reshape(8, -1, x.shape[1]).transpose(0, 2, 1)),
        g.reshape(8, -1, g.shape[1]),
        (((2,), (1,)), ((0,), (0,))),
        preferred_element_type=F32,
    ).sum(0),
    "products.bf16_weight_gradient": products.bf16_weight_gradient,
}


def median_seconds(fn, repeats: int) -> float:
    """Median wall seconds of fn() after one warm-up call (which compiles)."""
    fn()
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds)


def jax_call(fn, *args):
    compiled = jax.jit(fn)
    return lambda: jax.block_until_ready(compiled(*args))


def dense_forward_backward(dtype):
    """Forward and backward of products.dense_product with a float32 master kernel."""

    def loss(x, kernel, weights):
        return jnp.vdot(products.dense_product(x, kernel, dtype).astype(F32), weights)

    return jax.grad(loss, (0, 1))


def rows(shape: tuple[int, int, int], repeats: int):
    """(form, GFLOP/s or why it failed) rows for one [M, K] @ [K, N] product."""
    import torch

    m, k, n = shape
    flops = 2 * m * k * n
    rng = np.random.default_rng(0)
    a32, b32 = rng.standard_normal((m, k), np.float32), rng.standard_normal((k, n), np.float32)
    g32 = rng.standard_normal((m, n), np.float32)
    a, b, g = (jnp.asarray(x, BF16) for x in (a32, b32, g32))

    def gflops(fn, work=flops):
        """GFLOP/s of fn, or why XLA could not run it (a form it rewrites into a dot that
        neither YNNPACK nor its own dot runs: "Unsupported element type for DotThunk")."""
        try:
            return work / median_seconds(fn, repeats) / 1e9
        except jax.errors.JaxRuntimeError as error:
            return str(error).splitlines()[0][:60]

    for name, form in FORWARD_FORMS.items():
        f32 = FORWARD_DTYPES.get(name) == F32
        yield f"XLA {name}", gflops(jax_call(form, *((a32, b32) if f32 else (a, b))))
    for name, form in WEIGHT_GRADIENT_FORMS.items():
        yield f"XLA weight gradient: {name}", gflops(jax_call(form, a, g))
    for dtype in (F32, BF16):
        x = jnp.asarray(a32, dtype)
        label = jnp.dtype(dtype).name
        yield (
            f"products.dense_product {label}, forward",
            gflops(jax_call(lambda x, w, d=dtype: products.dense_product(x, w, d), x, b32)),
        )
        yield (
            f"products.dense_product {label}, forward + backward",
            gflops(jax_call(dense_forward_backward(dtype), x, b32, g32), 3 * flops),
        )

    torch_a32, torch_b32 = torch.from_numpy(a32), torch.from_numpy(b32)
    torch_a, torch_b = torch_a32.bfloat16(), torch_b32.bfloat16()
    torch_g = torch.from_numpy(g32).bfloat16()
    with torch.no_grad():
        yield "PyTorch f32", gflops(lambda: torch.matmul(torch_a32, torch_b32))
        yield "PyTorch bf16", gflops(lambda: torch.matmul(torch_a, torch_b))
        yield "PyTorch bf16 weight gradient x^T g", gflops(lambda: torch.matmul(torch_a.T, torch_g))
    for label, x, w in (("f32", torch_a32, torch_b32), ("bf16", torch_a, torch_b)):
        x, w_t = x.clone().requires_grad_(), w.T.contiguous().requires_grad_()
        grad = torch_g.to(x.dtype)

        def forward_backward(x=x, w_t=w_t, grad=grad):
            torch.nn.functional.linear(x, w_t).backward(grad)

        yield f"PyTorch linear {label}, forward + backward", gflops(forward_backward, 3 * flops)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--square", type=int, default=2048, help="M = K = N of the square row")
    parser.add_argument("--tokens", type=int, default=8 * 512, help="M of T5 1.1 small's rows")
    parser.add_argument(
        "--model_dims",
        default="512x1152,512x2048,1024x512",
        help="K x N of T5 1.1 small's products (q/k/v, MLP in, MLP out), comma-separated",
    )
    parser.add_argument("--repeats", type=harness.repeats, default=7)
    args = parser.parse_args()

    import torch

    shapes = [(args.square,) * 3] + [
        (args.tokens, *map(int, dims.split("x"))) for dims in args.model_dims.split(",")
    ]
    load = harness.load_average()
    print(
        f"CPU {harness.machine()['cpu']}, {os.cpu_count()} cores | load average {load:.2f}"
        f"{' (shared CPU: smoke numbers only)' if harness.is_shared(load) else ''} | "
        f"jax {jax.__version__} | torch {torch.__version__}, {torch.get_num_threads()} threads"
    )
    for shape in shapes:
        print(
            f"\n[{shape[0]}, {shape[1]}] x [{shape[1]}, {shape[2]}], GFLOP/s "
            f"(median of {args.repeats})"
        )
        for name, value in rows(shape, args.repeats):
            shown = f"{value:9.1f}" if isinstance(value, float) else f"fails: {value}"
            print(f"  {name:68s} {shown}", flush=True)
    print(f"\nload average after: {harness.load_average():.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
