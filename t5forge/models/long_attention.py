"""LongT5's encoder self-attention: local and transient-global, as Flaxformer and transformers
compute them (T5Config.encoder_attention).

Local: the sequence is cut into blocks of `local_radius + 1` positions (the last one padded);
the queries of a block attend to the keys of that block and of the blocks either side (the
3-block window), of which those at most `local_radius` positions away, valid and (packed) in
the query's segment count. The relative position bias is the stack's one table, read at the
window's fixed offsets. Work and memory grow with length x 3 blocks instead of length^2.

Transient-global adds up to `length // global_block_size` global tokens per row, built afresh
in every layer: each whole block of `global_block_size` positions of a sequence (counted from
the sequence's start, so packed segments each have their own) makes one global token, the sum
of the layer's (normed) inputs there passed through a norm of the layer's own (Flaxformer's
unnamed `T5LayerNorm_0`). A sequence's positions past its last whole block (the orphans) join
that block; padding, and a sequence shorter than one block, join none. Every valid position
attends to its window and to every global token of its own sequence in one softmax, the
global keys biased by a second table (`side_relpos_bias`) read at the distance between the
global token and the position's own block.

Layouts: queries and keys are heads-major [batch, heads, blocks, block_len, head_dim]; the
biases are computed once per stack (`long_attention_bias`) and shared by its layers.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from t5forge.models.attention import soft_cap
from t5forge.models.attention_layer import MultiHeadAttention
from t5forge.models.configs import TRANSIENT_GLOBAL_ATTENTION
from t5forge.models.layers import RMSNorm, mask_to_bias
from t5forge.models.products import einsum_product
from t5forge.models.rope import segment_positions

# Flaxformer's name for the norm of the global tokens (an unnamed T5LayerNorm in the attention).
GLOBAL_NORM_NAME = "T5LayerNorm_0"


class LongBias(NamedTuple):
    """What every layer of a long encoder adds to its logits, computed once per stack.

    local [batch, heads, blocks, block_len, 3 * block_len]: relative positions and the window
    mask; side [batch, heads, blocks, block_len, globals] and block_ids [batch, length] (each
    position's global token, -1 for none): transient-global only, else None.
    """

    local: jax.Array
    side: jax.Array | None = None
    block_ids: jax.Array | None = None


def split_blocks(x, block_len: int, axis: int):
    """x with `axis` (length) padded with zeros to whole blocks and split as [blocks, block_len]."""
    axis = axis % x.ndim
    pad = -x.shape[axis] % block_len
    x = jnp.pad(x, [(0, pad if i == axis else 0) for i in range(x.ndim)])
    blocks = x.shape[axis] // block_len
    return x.reshape(x.shape[:axis] + (blocks, block_len) + x.shape[axis + 1 :])


def three_block_window(blocks, block_axis: int):
    """blocks [..., blocks, block_len, ...] -> [..., blocks, 3 * block_len, ...]: each block
    beside its neighbours (zeros beyond the ends)."""
    block_axis = block_axis % blocks.ndim
    count = blocks.shape[block_axis]
    padded = jnp.pad(blocks, [(1, 1) if i == block_axis else (0, 0) for i in range(blocks.ndim)])
    window = [
        jax.lax.slice_in_dim(padded, start, start + count, axis=block_axis) for start in range(3)
    ]
    return jnp.concatenate(window, axis=block_axis + 1)


def window_offsets(block_len: int):
    """[block_len, 3 * block_len]: key position minus query position across the window."""
    return jnp.arange(3 * block_len)[None, :] - (jnp.arange(block_len) + block_len)[:, None]


def local_mask(valid, segment_ids, block_len: int):
    """Boolean [batch, 1, blocks, block_len, 3 * block_len]: which window keys each query sees
    (both valid, at most block_len - 1 apart, and in one segment when packed)."""
    query = split_blocks(valid, block_len, 1)
    key = three_block_window(query, 1)
    mask = query[..., :, None] & key[..., None, :]
    if segment_ids is not None:
        query_segments = split_blocks(segment_ids, block_len, 1)
        key_segments = three_block_window(query_segments, 1)
        mask &= query_segments[..., :, None] == key_segments[..., None, :]
    mask &= jnp.abs(window_offsets(block_len)) < block_len
    return mask[:, None]


def global_blocks(valid, block_size: int, segment_ids=None):
    """(block_ids int32 [batch, length], global_segments int32 [batch, globals]): each valid
    position's global token (numbered along the row; the orphans past a sequence's last whole
    block in that block; -1 for padding and for sequences shorter than one block), and the
    sequence (segment id; 1 unpacked) each global token belongs to, 0 for none."""
    batch, length = valid.shape
    num_globals = length // block_size
    if segment_ids is None:
        segments = valid.astype(jnp.int32)
        positions = jnp.broadcast_to(jnp.arange(length), valid.shape)
    else:
        segments = jnp.where(valid, segment_ids, 0).astype(jnp.int32)
        positions = segment_positions(segment_ids)
    lengths = jax.vmap(lambda v, s: jax.ops.segment_sum(v, s, num_segments=length + 1))(
        valid.astype(jnp.int32), segments
    )
    whole_blocks = jnp.take_along_axis(lengths, segments, axis=1) // block_size
    starts = valid & (positions % block_size == 0) & (positions // block_size < whole_blocks)
    block_ids = jnp.cumsum(starts, axis=1, dtype=jnp.int32) - 1
    block_ids = jnp.where(valid & (whole_blocks > 0), block_ids, -1)
    owners = jnp.where(starts, block_ids, num_globals)  # out of range: dropped
    global_segments = jnp.zeros((batch, num_globals), jnp.int32)
    global_segments = global_segments.at[jnp.arange(batch)[:, None], owners].set(
        segments, mode="drop"
    )
    return block_ids, global_segments


def long_attention_bias(config, relpos_bias, side_relpos_bias, valid, segment_ids=None):
    """The LongBias of a batch: `valid` [batch, length] bool, `relpos_bias` (and
    `side_relpos_bias`) the stack's RelativePositionBias modules."""
    block_len = config.local_radius + 1
    offsets = jnp.arange(block_len) + block_len, jnp.arange(3 * block_len)
    relpos = relpos_bias(*offsets).astype(jnp.float32)[:, :, None]  # [1, H, 1, bl, 3bl]
    local = mask_to_bias(local_mask(valid, segment_ids, block_len)) + relpos
    if config.encoder_attention != TRANSIENT_GLOBAL_ATTENTION:
        return LongBias(local)
    batch, length = valid.shape
    block_ids, global_segments = global_blocks(valid, config.global_block_size, segment_ids)
    num_globals = global_segments.shape[1]
    # [1, H, batch * length, globals] -> [batch, H, length, globals]
    side = side_relpos_bias(block_ids.reshape(-1), jnp.arange(num_globals)).astype(jnp.float32)
    side = side[0].reshape(side.shape[1], batch, length, num_globals).transpose(1, 0, 2, 3)
    segments = valid.astype(jnp.int32) if segment_ids is None else jnp.where(valid, segment_ids, 0)
    same_sequence = (segments[:, :, None] == global_segments[:, None, :]) & valid[:, :, None]
    side = side + mask_to_bias(same_sequence[:, None])
    return LongBias(local, split_blocks(side, block_len, 2), block_ids)


class LongSelfAttention(MultiHeadAttention):
    """An encoder layer's local or transient-global self-attention (the module docstring).

    T5X's query/key/value/out kernels (the global tokens' keys and values come from the same
    key/value kernels); transient-global adds the global tokens' norm, `T5LayerNorm_0`.
    """

    kind: str = TRANSIENT_GLOBAL_ATTENTION
    local_radius: int = 127

    def setup(self):
        super().setup()
        if self.kind == TRANSIENT_GLOBAL_ATTENTION:
            self.global_norm = RMSNorm(self.dtype, self.norm_epsilon, name=GLOBAL_NORM_NAME)

    def __call__(self, inputs, bias: LongBias, deterministic=True):
        """inputs [batch, length, emb] (the layer's normed activations) -> [batch, length, emb]."""
        length = inputs.shape[1]
        block_len = self.local_radius + 1
        query, key, value = self._heads(inputs, ("query", "key", "value"))
        query = split_blocks(query, block_len, 2)
        key, value = (
            three_block_window(split_blocks(self._all_heads(x), block_len, 2), 2)
            for x in (key, value)
        )
        logits = einsum_product("bhnqd,bhnkd->bhnqk", query, key, jnp.float32)
        biases = [bias.local]
        if bias.side is not None:
            side_key, side_value = self._global_keys(inputs, bias)
            side_logits = einsum_product("bhnqd,bhgd->bhnqg", query, side_key, jnp.float32)
            logits = jnp.concatenate([logits, side_logits], axis=-1)
            biases.append(bias.side)
        logits = soft_cap(logits, self.softcap)
        lead = jnp.broadcast_shapes(*(b.shape[:-1] for b in biases))
        logits = logits + jnp.concatenate(
            [jnp.broadcast_to(b, lead + b.shape[-1:]) for b in biases], axis=-1
        )
        weights = jax.nn.softmax(logits).astype(value.dtype)
        if not deterministic and self.dropout_rate > 0.0:
            weights = self.dropout(weights, deterministic=False)
        window = 3 * block_len
        context = einsum_product("bhnqk,bhnkd->bnqhd", weights[..., :window], value, value.dtype)
        if bias.side is not None:
            context += einsum_product(
                "bhnqg,bhgd->bnqhd", weights[..., window:], side_value, value.dtype
            )
        context = context.reshape(context.shape[0], -1, self.num_heads * self.head_dim)
        return self._project_context(context[:, :length])

    def _global_keys(self, inputs, bias: LongBias):
        """Keys and values [batch, heads, globals, head_dim] of the global tokens: the normed
        sums of each block's inputs (padding in none of them)."""
        num_globals = bias.side.shape[-1]
        members = jax.nn.one_hot(bias.block_ids, num_globals, dtype=inputs.dtype)  # -1: none
        sums = einsum_product("btd,btg->bgd", inputs, members, inputs.dtype)
        key, value = self._heads(self.global_norm(sums), ("key", "value"))
        return self._all_heads(key), self._all_heads(value)
