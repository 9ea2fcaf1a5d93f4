"""Rotary position embeddings (Gemma's, as transformers computes them) and packed positions.

A query or key vector at position p is rotated pair-wise: its first and second halves are the
two coordinates of head_dim / 2 planes turned by p * theta**(-2i / head_dim). Attention logits
then depend only on the distance between positions, so a packed example's segments each count
positions from 0 (`segment_positions`) and nothing else in the network has to know of packing.
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax


def segment_positions(segment_ids):
    """Position of every token inside its own segment: int32[B, L] for segment ids [B, L]."""
    length = segment_ids.shape[-1]
    index = jnp.broadcast_to(jnp.arange(length, dtype=jnp.int32), segment_ids.shape)
    starts = jnp.concatenate(
        [
            jnp.ones(segment_ids.shape[:-1] + (1,), bool),
            segment_ids[..., 1:] != segment_ids[..., :-1],
        ],
        axis=-1,
    )
    return index - lax.cummax(jnp.where(starts, index, 0), axis=segment_ids.ndim - 1)


def apply_rope(x, positions, theta: float, linear_factor: float | None = None):
    """x [B, heads, L, head_dim] rotated by its positions ([L] or [B, L]), in x's dtype;
    `linear_factor` divides the frequencies (positions / factor: 'linear' RoPE scaling).

    The angles are computed in float32 (as transformers does) whatever x's dtype.
    """
    head_dim = x.shape[-1]
    inverse_frequency = 1.0 / (
        theta ** (jnp.arange(0, head_dim, 2, dtype=jnp.float32) / jnp.float32(head_dim))
    )
    if linear_factor is not None:
        inverse_frequency = inverse_frequency / jnp.float32(linear_factor)
    positions = jnp.asarray(positions, jnp.float32)
    if positions.ndim == 1:
        positions = positions[None]
    angles = positions[:, None, :, None] * inverse_frequency  # [B or 1, 1, L, head_dim / 2]
    angles = jnp.concatenate([angles, angles], axis=-1)
    cos, sin = jnp.cos(angles).astype(x.dtype), jnp.sin(angles).astype(x.dtype)
    first, second = jnp.split(x, 2, axis=-1)
    rotated_half = jnp.concatenate([-second, first], axis=-1)
    return x * cos + rotated_half * sin
