"""What T5's attention bias costs the fused kernel, forward and backward, by the form it takes.

The H200 trace of 2026-11-28 (T5 1.1 large, batch 80, 512/114) put 83 ms of a 328 ms train step
in attention for 7% of its FLOPs: beside cuDNN's flash kernels (55 ms) ran `fmha_dbias` and
`matmul_dq` (26 ms). jax's cuDNN attention returns a gradient for any bias it is given, so the
padding mask folded into the relative position bias makes a [batch, heads, q, k] bias whose
gradient cuDNN writes out whole. This measures, for each of T5's three attentions at those
sizes, the same attention with its bias in other forms:

- `batched bias`: position bias + padding mask as one additive [B, H, q, k] bias (t5forge today);
- `shared bias + lengths`: the position bias alone [1, H, q, k], padding as sequence lengths and
  causality as the kernel's own mask (cuDNN's padding / causal mask types);
- `lengths only`: no bias at all (cross-attention has no position bias);
- `xla batched bias`: jax's XLA implementation of the first.

Each is timed as one jitted forward + backward (gradients for q, k, v and the position bias),
median of --runs after a warm-up, and checked against the XLA form (plain autodiff) on valid
positions: outputs, and each gradient relative to the largest of XLA's, with its magnitude.
Runs anywhere jax does; off a CUDA GPU only the XLA form runs.

    python3 benchmarks/attention_bias_forms.py --batch 80 --json /tmp/attention.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

NEG = -1e10


def _inputs(batch, heads, q_len, k_len, head_dim, seed=0):
    keys = jax.random.split(jax.random.PRNGKey(seed), 5)
    shape_q, shape_k = (batch, q_len, heads, head_dim), (batch, k_len, heads, head_dim)
    query = jax.random.normal(keys[0], shape_q, jnp.bfloat16)
    key = jax.random.normal(keys[1], shape_k, jnp.bfloat16)
    value = jax.random.normal(keys[2], shape_k, jnp.bfloat16)
    position = jax.random.normal(keys[3], (1, heads, q_len, k_len), jnp.float32)
    cotangent = jax.random.normal(keys[4], shape_q, jnp.bfloat16)
    # Real batches end in padding: a few rows shorter than the full length.
    q_lengths = jnp.asarray(q_len - (np.arange(batch) % 5), jnp.int32)
    k_lengths = jnp.asarray(k_len - (np.arange(batch) % 7) * 3, jnp.int32)
    # Padded queries feed nothing downstream (their keys are masked, their loss weight is 0).
    q_valid = jnp.arange(q_len)[None, :] < q_lengths[:, None]
    cotangent = jnp.where(q_valid[:, :, None, None], cotangent, 0).astype(jnp.bfloat16)
    return query, key, value, position, cotangent, q_lengths, k_lengths


def _forms(causal: bool, has_position: bool, cudnn: bool):
    """name -> attention(q, k, v, position, q_lengths, k_lengths) for each form that runs."""

    def batched(implementation):
        def attention(q, k, v, position, q_lengths, k_lengths):
            q_valid = jnp.arange(q.shape[1])[None, :] < q_lengths[:, None]
            k_valid = jnp.arange(k.shape[1])[None, :] < k_lengths[:, None]
            allowed = q_valid[:, None, :, None] & k_valid[:, None, None, :]
            if causal:
                allowed &= jnp.tril(jnp.ones((q.shape[1], k.shape[1]), bool))
            bias = jnp.where(allowed, 0.0, NEG)
            if has_position:
                bias = bias + position
            dtype = jnp.float32 if implementation == "xla" else q.dtype
            return jax.nn.dot_product_attention(
                q, k, v, bias=bias.astype(dtype), scale=1.0, implementation=implementation
            )

        return attention

    def lengths(with_position):
        def attention(q, k, v, position, q_lengths, k_lengths):
            return jax.nn.dot_product_attention(
                q,
                k,
                v,
                bias=position.astype(q.dtype) if with_position else None,
                scale=1.0,
                is_causal=causal,
                query_seq_lengths=q_lengths,
                key_value_seq_lengths=k_lengths,
                implementation="cudnn",
            )

        return attention

    forms = {"xla batched bias": batched("xla")}  # plain autodiff: the reference
    if cudnn:
        forms["batched bias"] = batched("cudnn")
        if has_position:
            forms["shared bias + lengths"] = lengths(True)
        forms["lengths only"] = lengths(False)
    return forms


def _step(attention):
    """One forward + backward: gradients for q, k, v and the position bias."""

    def loss(q, k, v, position, cotangent, q_lengths, k_lengths):
        out = attention(q, k, v, position, q_lengths, k_lengths)
        return jnp.sum(out.astype(jnp.float32) * cotangent.astype(jnp.float32)), out

    return jax.jit(jax.grad(loss, argnums=(0, 1, 2, 3), has_aux=True))


def measure(batch, heads, q_len, k_len, head_dim, causal, has_position, runs, cudnn):
    args = _inputs(batch, heads, q_len, k_len, head_dim)
    valid = np.arange(q_len)[None, :] < np.asarray(args[5])[:, None]  # [B, q]: real queries
    rows = {}
    reference = None
    for name, attention in _forms(causal, has_position, cudnn).items():
        step = _step(attention)
        start = time.perf_counter()
        try:
            grads, out = jax.block_until_ready(step(*args))
        except Exception as error:  # a form cuDNN refuses is a finding, not the end of the run
            rows[name] = {"error": f"{type(error).__name__}: {error}"[:300]}
            print(f"    {name:24s} failed: {rows[name]['error']}", flush=True)
            continue
        compiled_s = time.perf_counter() - start
        times = []
        for _ in range(runs):
            start = time.perf_counter()
            jax.block_until_ready(step(*args))
            times.append(time.perf_counter() - start)
        row = {"median_ms": 1e3 * statistics.median(times), "first_call_s": compiled_s}
        out = np.asarray(out, np.float32)
        grads = [np.asarray(g, np.float32) for g in grads]
        row["max_abs_position_grad"] = float(np.abs(grads[3]).max())
        if reference is None:
            reference = (out, grads)
        else:
            row["max_abs_diff_out"] = float(np.abs(out - reference[0])[valid].max())
            for label, grad, truth in zip(("q", "k", "v", "position"), grads, reference[1]):
                if label == "position" and not has_position:
                    continue
                scale = float(np.abs(truth).max()) or 1.0
                row[f"max_rel_diff_grad_{label}"] = float(np.abs(grad - truth).max() / scale)
        rows[name] = row
        print(
            f"    {name:24s} {row['median_ms']:8.3f} ms  (first call {compiled_s:5.1f} s)  "
            + "  ".join(f"{k} {v:.3g}" for k, v in row.items() if k.startswith("max")),
            flush=True,
        )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=80)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--head_dim", type=int, default=64)
    parser.add_argument("--input_length", type=int, default=512)
    parser.add_argument("--target_length", type=int, default=114)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    cudnn = jax.devices()[0].platform == "gpu"
    print(f"jax {jax.__version__} on {jax.devices()[0].device_kind}; cuDNN forms: {cudnn}")
    shapes = {
        "encoder self": (args.input_length, args.input_length, False, True),
        "decoder self": (args.target_length, args.target_length, True, True),
        "cross": (args.target_length, args.input_length, False, False),
    }
    results = {"batch": args.batch, "heads": args.heads, "head_dim": args.head_dim}
    for attention, (q_len, k_len, causal, has_position) in shapes.items():
        print(f"  {attention}: [{args.batch}, {args.heads}, {q_len}, {k_len}]", flush=True)
        results[attention] = measure(
            args.batch,
            args.heads,
            q_len,
            k_len,
            args.head_dim,
            causal,
            has_position,
            args.runs,
            cudnn,
        )
    if args.json:
        with open(args.json, "w") as file:
            json.dump(results, file, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
