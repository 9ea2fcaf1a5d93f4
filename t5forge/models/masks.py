"""Sliding-window attention masks, as transformers draws them for Gemma's windowed layers.

The encoder's window is bidirectional and spans |q - k| <= W (2W + 1 keys); the decoder's is
causal and spans q - W < k <= q (W keys, the query's own included). Positions are absolute
indices into the sequence or the decoding cache: packed segments are contiguous, so the
distance between two tokens of one segment is the distance of their indices.
"""

from __future__ import annotations

import jax.numpy as jnp


def sliding_window_mask(query_positions, key_positions, window: int, causal: bool):
    """Boolean [1, 1, q, k]: which keys lie inside each query's window."""
    distance = query_positions[:, None] - key_positions[None, :]
    inside = distance < window if causal else jnp.abs(distance) <= window
    return inside[None, None]
