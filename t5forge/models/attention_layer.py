"""T5's multi-head attention layer, with T5X's q/k/v/out kernels and the key/value cache that
incremental decoding reads and writes.

It lives apart from the other building blocks (layers.py) because it is the one that carries the
decoding state: the cache collection, prefill, one-step updates, the serving slots' rows and the
merged self + cross attention. Its kernel (XLA, cuDNN or written out) is chosen in attention.py.
"""

from __future__ import annotations

import math

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name

from t5forge.models import axes
from t5forge.models.attention import (
    attend,
    cached_attention,
    merge_attention_parts,
    slot_attention,
)
from t5forge.models.layers import (
    LAYER_NORM_EPSILON,
    Dense,
    Dropout,
    RMSNorm,
    constrain,
    default_kernel_init,
    fused_projections,
)
from t5forge.models.rope import apply_rope

# Where a merged attention keeps the encoder's keys/values: under cross-attention's module name,
# so decoding shares them between the decodes of one input as it shares cross-attention's.
MEMORY_NAME = "encoder_decoder_attention"


class MemoryCache(nn.Module):
    """The 'cache' entries `key`/`value` of a fixed memory, for a module that also has a cache
    of its own (MultiHeadAttention.merged)."""

    def store(self, key, value):
        self.put_variable("cache", "key", key)
        self.put_variable("cache", "value", value)

    def read(self):
        return self.get_variable("cache", "key"), self.get_variable("cache", "value")


class MultiHeadAttention(nn.Module):
    """Dot-product attention with T5X's q/k/v/out kernels and an optional key/value cache.

    Keys and values are kept heads-major, [batch, heads, length, head_dim], so the per-step
    attention over a long cache is a plain batched matmul (no transposed copy of the cache).
    Cache entries live in the flax 'cache' collection under `key`/`value`: cross-attention fills
    them once from the encoder output; self-attention starts from zeros (or from a prefill pass)
    and is updated one position per decoding step. The q/k/v projections are named
    `query_proj`/`key_proj`/`value_proj` for the 'proj' remat policy.

    Gemma's switches: `num_kv_heads` key/value heads shared by groups of query heads (the cache
    holds only those), `query_scale` multiplying the queries, `softcap` on the logits, and
    `rope_theta` rotating queries and keys by the `positions` a self-attention call is given
    (divided by `rope_linear_factor` where set).
    """

    emb_dim: int
    num_heads: int
    head_dim: int
    dropout_rate: float = 0.0
    dtype: jnp.dtype = jnp.float32
    implementation: str = "auto"
    scale_logits: bool = False  # T5Config.scale_attn_logits: queries times head_dim**-0.5
    num_kv_heads: int | None = None
    query_scale: float | None = None
    softcap: float | None = None
    rope_theta: float | None = None
    rope_linear_factor: float | None = None
    qk_norm: bool = False  # RMSNorms over head_dim on queries and keys (T5Gemma 2)
    norm_epsilon: float = LAYER_NORM_EPSILON
    zero_centered_norm: bool = False

    @property
    def _kv_heads(self) -> int:
        return self.num_heads if self.num_kv_heads is None else self.num_kv_heads

    def setup(self):
        inner = self.num_heads * self.head_dim
        kv_inner = self._kv_heads * self.head_dim

        # T5 never divides logits by sqrt(head_dim); its query initializer is scaled instead.
        def query_init(*args):
            return default_kernel_init(*args) / math.sqrt(self.head_dim)

        self.query = Dense(inner, (axes.EMBED, axes.JOINED_KV), self.dtype, query_init)
        self.key = Dense(kv_inner, (axes.EMBED, axes.JOINED_KV), self.dtype)
        self.value = Dense(kv_inner, (axes.EMBED, axes.JOINED_KV), self.dtype)
        self.out = Dense(self.emb_dim, (axes.JOINED_KV, axes.EMBED), self.dtype)
        self.dropout = Dropout(self.dropout_rate)
        if self.qk_norm:
            norm = (self.dtype, self.norm_epsilon, self.zero_centered_norm, axes.KV)
            self.query_norm, self.key_norm = RMSNorm(*norm), RMSNorm(*norm)
        # The encoder's keys/values of a merged attention (`merged`), as cross-attention's.
        self.memory = MemoryCache(name=MEMORY_NAME)

    def _heads(self, x, names: tuple[str, ...], positions=None) -> list:
        """Projections of x [B, T, E] by the `names` kernels, each [B, heads, T, head_dim]
        (queries num_heads, keys/values num_kv_heads), rotated by `positions` under RoPE."""
        projections = fused_projections(self, x, {n: getattr(self, n) for n in names}, self.dtype)
        heads = [
            self._split_heads(
                checkpoint_name(y, f"{name}_proj"),
                self.num_heads if name == "query" else self._kv_heads,
            )
            for name, y in zip(names, projections, strict=True)
        ]
        if self.qk_norm:  # before the scale and the rotation, as Gemma 3
            norms = {"query": self.query_norm, "key": self.key_norm}
            heads = [norms[n](h) if n in norms else h for n, h in zip(names, heads, strict=True)]
        scale = self.head_dim**-0.5 if self.scale_logits else self.query_scale
        if scale is not None and names[0] == "query":  # scales q k^T on every path
            heads[0] = heads[0] * jnp.asarray(scale, heads[0].dtype)
        if self.rope_theta is not None and positions is not None:
            heads = [
                apply_rope(h, positions, self.rope_theta, self.rope_linear_factor)
                if name in ("query", "key")
                else h
                for name, h in zip(names, heads, strict=True)
            ]
        return heads

    def _split_heads(self, y, heads: int):
        """A projection [B, T, heads * head_dim] -> [B, heads, T, head_dim]."""
        y = y.reshape(y.shape[:-1] + (heads, self.head_dim)).transpose(0, 2, 1, 3)
        return constrain(y, axes.BATCH, axes.HEADS, axes.LENGTH, axes.KV)

    def _all_heads(self, x):
        """Keys or values [B, kv_heads, L, D] repeated for each query head of their group."""
        groups = self.num_heads // self._kv_heads
        return x if groups == 1 else jnp.repeat(x, groups, axis=1)

    def _attend(self, query, key, value, bias, deterministic):
        dropout = None
        if not deterministic and self.dropout_rate > 0.0:

            def dropout(weights):
                return self.dropout(weights, deterministic=False)

        context = attend(
            query,
            self._all_heads(key),
            self._all_heads(value),
            bias,
            self.implementation,
            dropout,
            softcap=self.softcap,
        )
        return self._project_context(
            context.reshape(context.shape[:2] + (self.num_heads * self.head_dim,))
        )

    def __call__(self, inputs_q, inputs_kv, bias, deterministic=True, positions=None):
        """Full attention of inputs_q [B, q, E] over inputs_kv [B, k, E] plus bias [., ., q, k].

        `positions` ([q] or [B, q]) rotate a self-attention's queries and keys under RoPE.
        """
        if inputs_q is inputs_kv:
            query, key, value = self._heads(inputs_q, ("query", "key", "value"), positions)
        else:
            (query,) = self._heads(inputs_q, ("query",))
            key, value = self._heads(inputs_kv, ("key", "value"))
        return self._attend(query, key, value, bias, deterministic)

    def prefill(self, inputs, bias, deterministic=True, positions=None):
        """Self-attention over the whole prompt that also stores its keys/values as the cache."""
        query, key, value = self._heads(inputs, ("query", "key", "value"), positions)
        self.put_variable("cache", "key", key)
        self.put_variable("cache", "value", value)
        return self._attend(query, key, value, bias, deterministic)

    def fill_cache(self, inputs_kv):
        """Stores keys/values of a fixed memory (the encoder output) once, for every step."""
        key, value = self._heads(inputs_kv, ("key", "value"))
        self.put_variable("cache", "key", key)
        self.put_variable("cache", "value", value)

    def zero_cache(self, batch_size: int, length: int):
        """An empty self-attention cache for `length` decoding positions."""
        zeros = jnp.zeros((batch_size, self._kv_heads, length, self.head_dim), self.dtype)
        self.put_variable("cache", "key", zeros)
        self.put_variable("cache", "value", zeros)

    def decode_step(self, inputs_q, bias, index=None, write=None, select_reads=False):
        """Attention of one new position [N, 1, E] over the cache.

        With `index` (self-attention) the new key/value is written at that position of each
        row's own cache first, but only for rows where `write` [N] is true (rows still inside a
        prefilled prompt keep the prefill's keys), and the bias is slot_attention's, [G or 1,
        S, H or 1, S or 1, L] for groups of S rows. Without it (cross-attention) the cache is
        read only, and it may hold one memory per input [B, ...] for N = B * k rows (k decodes
        of each input). `select_reads`: see _write_step.
        """
        if index is not None:
            query, key, value = self._write_step(inputs_q, index, write, select_reads)
            return self._attend_slots(query, key, value, bias)
        key = self.get_variable("cache", "key")
        value = self.get_variable("cache", "value")
        return self._attend_cache(inputs_q, key, value, bias)

    def _write_step(self, inputs_q, index, write, select_reads=False):
        """(query, keys, values) of one decoding step: its key/value written into the cache
        at `index` (for rows where `write` is true, see decode_step).

        The keys and values returned are the written cache, or with `select_reads` the same
        values read as a select of the new position over the cache as it was. For one row
        stepped in a loop (the server's lone row) XLA fuses the written cache twice, into the
        loop's carry and into the attention's read, and copies each cache ~5 times per token
        (36-39 copies of 128 KB for the demo model); the select leaves 12 and the 8-token call
        7-8% faster. Where rows are stepped together the write is a scatter done in place, and
        the select (a fresh copy of every row's cache per token) made calls 1.2-1.9x slower.
        """
        key = self.get_variable("cache", "key")
        value = self.get_variable("cache", "value")
        query, new_key, new_value = self._heads(
            inputs_q, ("query", "key", "value"), jnp.reshape(index, (1,))
        )
        if write is not None:
            keep = write[:, None, None, None]
            start = (0, 0, index, 0)
            old_key = jax.lax.dynamic_slice(key, start, new_key.shape)
            old_value = jax.lax.dynamic_slice(value, start, new_value.shape)
            new_key = jnp.where(keep, new_key, old_key)
            new_value = jnp.where(keep, new_value, old_value)
        new_key, new_value = new_key.astype(key.dtype), new_value.astype(value.dtype)
        written_key = jax.lax.dynamic_update_slice(key, new_key, (0, 0, index, 0))
        written_value = jax.lax.dynamic_update_slice(value, new_value, (0, 0, index, 0))
        self.put_variable("cache", "key", written_key)
        self.put_variable("cache", "value", written_value)
        if not select_reads:
            return query, written_key, written_value
        at_index = (jnp.arange(key.shape[2]) == index)[:, None]
        return query, jnp.where(at_index, new_key, key), jnp.where(at_index, new_value, value)

    def _attend_slots(self, query, key, value, bias):
        """Each row's query [rows, heads, 1, head_dim] over its group's self-attention caches
        (attention.slot_attention)."""
        context = self._slots_context(query, key, value, bias)
        return self._project_context(context.reshape(context.shape[:2] + (-1,)))

    def _slots_context(self, query, key, value, bias, with_lse=False):
        """slot_attention's context [rows, 1, heads, head_dim] (and log-sum-exp [rows, 1,
        heads] `with_lse`) for queries [rows, heads, 1, head_dim]."""
        return self._grouped_context(
            slot_attention, bias.shape[1], query, key, value, bias, with_lse
        )

    def _attend_cache(self, inputs_q, key, value, bias):
        """One query per row over a heads-major cache (attention.cached_attention).

        The k decodes of one input (beams, samples) that share a memory are folded into the
        query axis, so the memory is read once per input, not k times.
        """
        (query,) = self._heads(inputs_q, ("query",))  # [rows, heads, 1, head_dim]
        context = self._cache_context(query, key, value, bias)
        return self._project_context(context.reshape(context.shape[:2] + (-1,)))

    def _cache_context(self, query, key, value, bias, with_lse=False):
        """cached_attention's context [rows, 1, heads, head_dim] (and log-sum-exp [rows, 1,
        heads] `with_lse`) for queries [rows, heads, 1, head_dim] over per-input memories."""
        groups = query.shape[0] // key.shape[0]
        return self._grouped_context(cached_attention, groups, query, key, value, bias, with_lse)

    def _grouped_context(self, attend, group, query, key, value, bias, with_lse):
        """`attend` over the queries regrouped [rows / group, heads, group, head_dim], its
        context back as [rows, 1, heads, head_dim] (and log-sum-exp [rows, 1, heads])."""
        rows = query.shape[0]
        query = query.reshape(rows // group, group, self.num_heads, self.head_dim)
        out = attend(
            query.transpose(0, 2, 1, 3),
            self._all_heads(key),
            self._all_heads(value),
            bias,
            self.softcap,
            with_lse,
        )
        if not with_lse:
            return out.reshape(rows, 1, self.num_heads, self.head_dim)
        context, lse = out
        return context.reshape(rows, 1, self.num_heads, self.head_dim), lse.reshape(rows, 1, -1)

    # -- merged attention (T5Gemma 2's decoder): one softmax over its own and the encoder's
    # positions, both projected by these kernels; the encoder's keys are not rotated.

    def merged(self, inputs, memory, self_bias, cross_bias, deterministic=True, positions=None):
        """Teacher-forced merged attention of inputs [B, T, E] over themselves and `memory`
        [B, S, E]; biases [., ., T, T] and [., ., T, S]."""
        query, key, value = self._heads(inputs, ("query", "key", "value"), positions)
        memory_key, memory_value = self._heads(memory, ("key", "value"))
        lead = jnp.broadcast_shapes(self_bias.shape[:3], cross_bias.shape[:3])
        bias = jnp.concatenate(
            [
                jnp.broadcast_to(self_bias, lead + self_bias.shape[3:]),
                jnp.broadcast_to(cross_bias, lead + cross_bias.shape[3:]),
            ],
            axis=-1,
        )
        key = jnp.concatenate([key, memory_key.astype(key.dtype)], axis=2)
        value = jnp.concatenate([value, memory_value.astype(value.dtype)], axis=2)
        return self._attend(query, key, value, bias, deterministic)

    def fill_merged_cache(self, memory, batch_size: int, length: int):
        """An empty self-attention cache and the memory's keys/values ('init' mode)."""
        self.zero_cache(batch_size, length)
        self.memory.store(*self._heads(memory, ("key", "value")))

    def merged_step(self, inputs_q, self_bias, cross_bias, index, write=None, select_reads=False):
        """One decoding step of merged attention: decode_step's self part and cross part,
        joined into one softmax (attention.merge_attention_parts)."""
        query, key, value = self._write_step(inputs_q, index, write, select_reads)
        memory_key, memory_value = self.memory.read()
        context = merge_attention_parts(
            [
                self._slots_context(query, key, value, self_bias, with_lse=True),
                self._cache_context(query, memory_key, memory_value, cross_bias, with_lse=True),
            ]
        )
        return self._project_context(context.reshape(context.shape[:2] + (-1,)))

    def _project_context(self, context):
        return constrain(self.out(context), axes.BATCH, axes.LENGTH, axes.EMBED)
