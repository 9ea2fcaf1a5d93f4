"""A decoding step's attention as one compiled call, reading only the positions a query sees.

XLA:CPU runs a step's attention as two batched dots with the softmax fused between them
(YNNPACK), a few MFLOP that cost far more than their arithmetic (docs/performance.md: the
slot attention took ~7 of a 15 ms beam-4 step of T5 1.1 small) and that read every position of
every cache row, masked or not. The compiled module's `t5forge_decode_attention`
(kernels/src/decode_attention.cc) scores each query only at the positions its bias leaves
visible (causally written so far; under beam search, the beam it descends from) and skips the
rest, which XLA weighs by exactly 0. Float32 logits, softmax and context, as attention.py's.

Used by attention.cached_attention and attention.slot_attention where the compiled products
run (native_products.replaces_xla_here), without soft-capping or a log-sum-exp; everywhere
else they keep XLA's formulation.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from t5forge.errors import ConfigError
from t5forge.models import native_products

_DTYPES = (jnp.dtype(jnp.float32), jnp.dtype(jnp.bfloat16))
# The cache size (elements of key) from which one query per row goes to the kernel: where its
# calls are big enough to share with XLA's other threads (kernels/src/decode_attention.cc).
_ONE_QUERY_MIN_CACHE = 1 << 20


def runs_here(query, key, value, slots: int = 1, softcap=None, with_lse: bool = False) -> bool:
    """Whether `decode_attention` takes these operands on this machine: several decodes per
    input (beams, samples: query [G, H, R > 1, D]), several cache rows each (`slots` > 1), or
    one query over one row in a cache of at least _ONE_QUERY_MIN_CACHE elements; never with a
    logit soft-cap or a log-sum-exp asked for (the kernel computes neither).

    Below that size, one query over one row (greedy at small batches, the server's rows) stays
    with XLA, whose matrix-vector dots were as fast there (greedy T5 1.1 small, batch 8, int8:
    0.48 s per generate both ways with the kernel on two threads, 0.53 s on one). Above it the
    kernel runs on every thread and skips the padding: the demo checkpoint's greedy batch of 100
    took 1.7-1.8 s instead of 1.9-2.1 s (int8) and 2.1-2.3 s instead of 2.4 s (float32)."""
    dtype = jnp.dtype(query.dtype)
    return (
        softcap is None
        and not with_lse
        and (query.shape[2] * slots > 1 or key.size >= _ONE_QUERY_MIN_CACHE)
        and query.shape[-1] % 16 == 0  # the kernel's vectors
        and dtype in _DTYPES
        and key.dtype == dtype
        and value.dtype == dtype
        and native_products.replaces_xla_here()
    )


def _check_shapes(query, key, value, bias) -> None:
    """One clear error for operands the kernel cannot read (instead of XLA's at run time)."""
    fits = len(query) == 4 and len(key) == 4 and key == value and len(bias) == 5
    if fits:
        groups, heads, queries, head_dim = query
        bias_groups, slots, bias_heads, bias_queries, length = bias
        fits = (
            key == (groups * slots, heads, length, head_dim)
            and head_dim % 16 == 0
            and bias_groups in (1, groups)
            and bias_heads in (1, heads)
            and bias_queries in (1, queries)
        )
    if not fits:
        raise ConfigError(
            "decode_attention wants query [G, H, R, D] (D a multiple of 16), key = value "
            f"[G*S, H, L, D] and bias [G|1, S, H|1, R|1, L]; got query {query}, key {key}, "
            f"value {value}, bias {bias}"
        )


def decode_attention(query, key, value, bias):
    """softmax(q k^T + bias) v for queries [G, H, R, D] over key/value [G * S, H, L, D], the
    softmax over each input's S rows and L positions together; bias [G or 1, S, H or 1, R or 1,
    L] (None: every position of one row each, S = 1). Returns [G, R, H, D] in value's dtype."""
    native_products.require()
    groups, heads, queries, head_dim = query.shape
    if bias is None:
        bias = jnp.zeros((1, 1, 1, 1, key.shape[2]), jnp.float32)
    _check_shapes(query.shape, key.shape, value.shape, bias.shape)
    call = jax.ffi.ffi_call(
        "t5forge_decode_attention",
        jax.ShapeDtypeStruct((groups, queries, heads, head_dim), value.dtype),
        vmap_method="sequential",
    )
    return call(query, key, value, bias.astype(jnp.float32))
