"""Sliding-window attention masks, as transformers draws them for Gemma's windowed layers.

The encoder's window is bidirectional and spans |q - k| <= W (2W + 1 keys; T5Gemma), or W
keys split around the query, (W + 1) // 2 at or before it and W // 2 after (T5Gemma 2); the
decoder's is causal and spans q - W < k <= q (W keys, the query's own included). Positions are absolute
indices into the sequence or the decoding cache: packed segments are contiguous, so the
distance between two tokens of one segment is the distance of their indices.
"""

from __future__ import annotations

import jax.numpy as jnp


def sliding_window_mask(
    query_positions, key_positions, window: int, causal: bool, split: bool = False
):
    """Boolean [1, 1, q, k]: which keys lie inside each query's window (`split`: the
    encoder's T5Gemma 2 shape)."""
    distance = query_positions[:, None] - key_positions[None, :]
    if causal:
        inside = distance < window
    elif split:
        inside = (distance >= -(window // 2)) & (distance < (window + 1) // 2)
    else:
        inside = jnp.abs(distance) <= window
    return inside[None, None]
