"""The building blocks of a T5 network, with T5X's parameter names and 2-D kernel shapes.

Every parameter is float32 and carries logical axis names (`nn.with_logical_partitioning`) so the
partitioner can shard it; activations run in the config dtype and carry logical constraints.
The math follows the published T5 models exactly: RMS norm in float32, no 1/sqrt(d) attention
scaling (it lives in the query initializer), bucketed relative position biases, gated or plain
MLPs. Attention also implements the key/value cache used by incremental decoding; its kernel
(XLA, cuDNN or written out) is chosen in attention.py.
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
from t5forge.models.products import dense_product
from t5forge.models.rope import apply_rope

# Large enough to zero a softmax weight, small enough to stay finite in bfloat16.
MASK_BIAS = -1e10
LAYER_NORM_EPSILON = 1e-6

default_kernel_init = nn.initializers.variance_scaling(1.0, "fan_in", "truncated_normal")


def constrain(x, *names):
    """Names the logical axes of an activation so a mesh (when active) can shard it."""
    return nn.with_logical_constraint(x, names)


def activation_fn(name: str):
    """The activation called `name` in T5Config.mlp_activations ('gelu' is the tanh form)."""
    if name == "linear":
        return lambda x: x
    if name == "gelu":
        return lambda x: jax.nn.gelu(x, approximate=True)
    return getattr(jax.nn, name)


class Dropout(nn.Module):
    """Inverted dropout whose mask bits come from XLA's RngBitGenerator.

    flax's Dropout draws its mask with threefry, which XLA expands into a large graph at every
    dropout site: a tiny T5 train step took ~17 s of CPU to compile with it and ~4 s with this.
    The mask is still a pure function of the 'dropout' rng, so training stays reproducible.
    `broadcast_dims` share one mask value along those axes (T5X shares it along length).
    """

    rate: float
    broadcast_dims: tuple[int, ...] = ()

    @nn.compact
    def __call__(self, x, deterministic: bool):
        if deterministic or self.rate == 0.0:
            return x
        key_bits = jax.random.key_data(self.make_rng("dropout")).reshape(-1)[:2]
        rbg_key = jax.random.wrap_key_data(
            jnp.concatenate([key_bits, key_bits ^ jnp.uint32(0x9E3779B9)]), impl="rbg"
        )
        shape = tuple(
            1 if i in self.broadcast_dims or i - x.ndim in self.broadcast_dims else d
            for i, d in enumerate(x.shape)
        )
        keep = jax.random.bernoulli(rbg_key, 1.0 - self.rate, shape)
        return jnp.where(keep, x / (1.0 - self.rate), jnp.zeros_like(x)).astype(x.dtype)


class Dense(nn.Module):
    """x @ kernel with a 2-D float32 kernel [in, out], computed in `dtype` (see
    products.dense_product for a kernel stored narrower)."""

    features: int
    axes: tuple[str, str]
    dtype: jnp.dtype = jnp.float32
    kernel_init: nn.initializers.Initializer = default_kernel_init

    @nn.compact
    def __call__(self, x):
        kernel = self.param(
            "kernel",
            nn.with_logical_partitioning(self.kernel_init, self.axes),
            (x.shape[-1], self.features),
            jnp.float32,
        )
        return dense_product(x, kernel, jnp.dtype(self.dtype))


def fused_projections(module: nn.Module, x, denses: dict[str, nn.Module], dtype) -> list:
    """[dense(x) for each of `module`'s Dense children `denses` (by name)], as one matmul.

    Several projections of one input (q/k/v, a gated MLP's wi_0/wi_1) run faster on XLA:CPU
    as one wide matmul than as several narrow ones, in training and in decoding steps alike,
    and their backward pass is one matmul too. The kernels are stacked on a new middle axis,
    [in, n, out]: in memory that is their concatenation, while a model-parallel sharding of
    `out` stays where it was. Inside a decoding loop XLA hoists the stacking out of the loop;
    a program of one step (a server's) would copy every kernel per call, so it may be given
    the stacked kernel ahead of time (`stack_projections`).
    The parameters stay separate; while they are being created, each child runs alone.
    """
    if len(denses) == 1 or module.is_initializing():
        return [dense(x) for dense in denses.values()]
    params = module.variables["params"]
    kernel = params.get(stacked_name(denses))
    if kernel is None:
        kernel = _stack([nn.unbox(params[name]["kernel"]) for name in denses])
    fused = dense_product(x, nn.unbox(kernel), jnp.dtype(dtype))
    if fused.ndim == x.ndim:  # grouped-query attention: narrower keys/values, side by side
        widths = [dense.features for dense in denses.values()]
        return jnp.split(fused, [sum(widths[: i + 1]) for i in range(len(widths) - 1)], -1)
    return [fused[..., i, :] for i in range(len(denses))]


def stacked_name(names) -> str:
    """The parameter name under which `names`' kernels are kept stacked ahead of time."""
    return "+".join(names)


def _stack(kernels: list) -> jnp.ndarray:
    """Kernels [..., in, out] of one input as one: [..., in, n, out], or [..., in, sum(out)]
    if widths differ (a leading axis is scanned layers'); an Int8Kernel's values and scales
    alike."""
    if len({kernel.shape[-1] for kernel in kernels}) > 1:
        return jax.tree.map(lambda *parts: jnp.concatenate(parts, axis=-1), *kernels)
    return jax.tree.map(lambda *parts: jnp.stack(parts, axis=-2), *kernels)


# The groups of projections fused_projections is called with (attention's and the MLP's).
_FUSED_GROUPS = (("query", "key", "value"), ("key", "value"), ("wi_0", "wi_1"))


def stack_projections(params: dict) -> dict:
    """`params` with every fused group's kernels also kept stacked (`stacked_name`), made once:
    a one-step program then multiplies by them instead of copying them per call. The
    separate kernels stay (single projections still read them)."""
    if not isinstance(params, dict):
        return params
    result = {name: stack_projections(child) for name, child in params.items()}
    for group in _FUSED_GROUPS:
        if all(isinstance(params.get(name), dict) and "kernel" in params[name] for name in group):
            result[stacked_name(group)] = _stack([params[name]["kernel"] for name in group])
    return result


class RMSNorm(nn.Module):
    """T5's layer norm: scale * x / rms(x), no mean subtraction or bias, computed in float32.

    `zero_centered` is Gemma's form: (1 + scale) * x / rms(x), scale initialised to zeros.
    """

    dtype: jnp.dtype = jnp.float32
    epsilon: float = LAYER_NORM_EPSILON
    zero_centered: bool = False
    axis_name: str = axes.EMBED  # the logical axis of what is normalised (KV: QK-norm)

    @nn.compact
    def __call__(self, x):
        init = nn.initializers.zeros if self.zero_centered else nn.initializers.ones
        scale = self.param(
            "scale",
            nn.with_logical_partitioning(init, (self.axis_name,)),
            (x.shape[-1],),
            jnp.float32,
        )
        if self.zero_centered:
            scale = 1.0 + scale
        x = x.astype(jnp.float32)
        x = x * jax.lax.rsqrt(jnp.mean(jnp.square(x), axis=-1, keepdims=True) + self.epsilon)
        return (x * scale).astype(self.dtype)


class Embed(nn.Module):
    """A token embedding; `attend` turns it into tied output logits (float32).

    `scaled` multiplies the looked-up vectors by sqrt(features) (Gemma), not the tied logits;
    `special_token_id` is embedded by a learned vector of its own, `eoi_embedding` (T5Gemma 2's
    end of image), unscaled.
    """

    num_embeddings: int
    features: int
    dtype: jnp.dtype = jnp.float32
    scaled: bool = False
    special_token_id: int | None = None

    def setup(self):
        self.embedding = self.param(
            "embedding",
            nn.with_logical_partitioning(
                nn.initializers.normal(stddev=1.0), (axes.VOCAB, axes.EMBED)
            ),
            (self.num_embeddings, self.features),
            jnp.float32,
        )
        if self.special_token_id is not None:
            self.eoi_embedding = self.param(
                "eoi_embedding",
                nn.with_logical_partitioning(nn.initializers.zeros, (axes.EMBED,)),
                (self.features,),
                jnp.float32,
            )

    def __call__(self, token_ids):
        """Embedding vectors [..., features] of token_ids, in the activation dtype."""
        vectors = jnp.take(self.embedding, token_ids, axis=0).astype(self.dtype)
        if self.scaled:
            vectors = vectors * jnp.asarray(self.features**0.5, self.dtype)
        if self.special_token_id is not None:
            special = (token_ids == self.special_token_id)[..., None]
            vectors = jnp.where(special, self.eoi_embedding.astype(self.dtype), vectors)
        return vectors

    def attend(self, x):
        """x @ embedding.T in float32: the tied output projection (T5 1.0)."""
        return jnp.dot(x.astype(jnp.float32), self.embedding.T)


def relative_position_bucket(
    relative_position, bidirectional: bool, num_buckets: int, max_distance: int
):
    """Maps key_position - query_position to T5's buckets: exact near 0, log-spaced far away."""
    bucket = 0
    distance = -relative_position
    if bidirectional:
        num_buckets //= 2
        bucket = (distance < 0).astype(jnp.int32) * num_buckets
        distance = jnp.abs(distance)
    else:
        distance = jnp.maximum(distance, 0)
    max_exact = num_buckets // 2
    # Clamp before the log so that distance 0 never produces -inf (those use the exact branch).
    log_ratio = jnp.log(jnp.maximum(distance, 1).astype(jnp.float32) / max_exact)
    far = max_exact + (
        log_ratio / math.log(max_distance / max_exact) * (num_buckets - max_exact)
    ).astype(jnp.int32)
    far = jnp.minimum(far, num_buckets - 1)
    return bucket + jnp.where(distance < max_exact, distance, far)


class RelativePositionBias(nn.Module):
    """One learned scalar per (head, bucket), shared by all layers of a stack."""

    num_heads: int
    num_buckets: int
    max_distance: int
    bidirectional: bool
    dtype: jnp.dtype = jnp.float32

    @nn.compact
    def __call__(self, query_positions, key_positions):
        """Bias [1, heads, q, k] for 1-D position vectors (q may be a single traced step)."""
        table = self.param(
            "rel_embedding",
            nn.with_logical_partitioning(
                nn.initializers.variance_scaling(1.0, "fan_avg", "uniform"),
                (axes.HEADS, axes.RELPOS_BUCKETS),
            ),
            (self.num_heads, self.num_buckets),
            jnp.float32,
        )
        buckets = relative_position_bucket(
            key_positions[None, :] - query_positions[:, None],
            self.bidirectional,
            self.num_buckets,
            self.max_distance,
        )
        return jnp.take(table, buckets, axis=1)[None].astype(self.dtype)


def mask_to_bias(mask, dtype=jnp.float32):
    """Boolean attention mask [B, 1, q, k] -> additive bias (0 where allowed)."""
    return jnp.where(mask, 0.0, MASK_BIAS).astype(dtype)


def pairwise_mask(query_values, key_values, fn=jnp.logical_and):
    """[B, q] x [B, k] -> [B, 1, q, k] boolean mask, fn applied to every (query, key) pair."""
    return fn(query_values[:, None, :, None], key_values[:, None, None, :])


def decoder_self_mask(length: int, valid=None, segment_ids=None, causal_attention=None):
    """Causal mask, opened bidirectionally inside a prefix-LM prefix, restricted to segments."""
    positions = jnp.arange(length)
    mask = (positions[None, :] <= positions[:, None])[None, None]
    if causal_attention is not None:
        prefix = causal_attention.astype(bool)
        mask = jnp.logical_or(mask, pairwise_mask(prefix, prefix))
    if valid is not None:
        mask = jnp.logical_and(mask, pairwise_mask(valid, valid))
    if segment_ids is not None:
        mask = jnp.logical_and(mask, pairwise_mask(segment_ids, segment_ids, jnp.equal))
    return mask


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

    def decode_step(self, inputs_q, bias, index=None, write=None):
        """Attention of one new position [N, 1, E] over the cache.

        With `index` (self-attention) the new key/value is written at that position of each
        row's own cache first, but only for rows where `write` [N] is true (rows still inside a
        prefilled prompt keep the prefill's keys), and the bias is slot_attention's, [G or 1,
        S, H or 1, S or 1, L] for groups of S rows. Without it (cross-attention) the cache is
        read only, and it may hold one memory per input [B, ...] for N = B * k rows (k decodes
        of each input).
        """
        if index is not None:
            query, key, value = self._write_step(inputs_q, index, write)
            return self._attend_slots(query, key, value, bias)
        key = self.get_variable("cache", "key")
        value = self.get_variable("cache", "value")
        return self._attend_cache(inputs_q, key, value, bias)

    def _write_step(self, inputs_q, index, write):
        """(query, keys, values) of one decoding step: its key/value written into the cache
        at `index` (for rows where `write` is true, see decode_step)."""
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
        key = jax.lax.dynamic_update_slice(key, new_key.astype(key.dtype), (0, 0, index, 0))
        value = jax.lax.dynamic_update_slice(value, new_value.astype(value.dtype), (0, 0, index, 0))
        self.put_variable("cache", "key", key)
        self.put_variable("cache", "value", value)
        return query, key, value

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

    def merged_step(self, inputs_q, self_bias, cross_bias, index, write=None):
        """One decoding step of merged attention: decode_step's self part and cross part,
        joined into one softmax (attention.merge_attention_parts)."""
        query, key, value = self._write_step(inputs_q, index, write)
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


class MlpBlock(nn.Module):
    """Position-wise feed-forward: product of activated projections (gated if more than one)."""

    emb_dim: int
    mlp_dim: int
    activations: tuple[str, ...]
    dropout_rate: float = 0.0
    dtype: jnp.dtype = jnp.float32

    @nn.compact
    def __call__(self, x, deterministic=True):
        names = (
            ("wi",)
            if len(self.activations) == 1
            else tuple(f"wi_{i}" for i in range(len(self.activations)))
        )
        denses = {
            name: Dense(self.mlp_dim, (axes.EMBED, axes.MLP), self.dtype, name=name)
            for name in names
        }
        projections = fused_projections(self, x, denses, self.dtype)
        hidden = None
        for name, h in zip(self.activations, projections, strict=True):
            h = activation_fn(name)(h)
            hidden = h if hidden is None else hidden * h
        hidden = constrain(hidden, axes.BATCH, axes.LENGTH, axes.MLP)
        hidden = Dropout(self.dropout_rate, broadcast_dims=(-2,))(
            hidden, deterministic=deterministic
        )
        return Dense(self.emb_dim, (axes.MLP, axes.EMBED), self.dtype, name="wo")(hidden)
