"""The building blocks of a T5 network, with T5X's parameter names and 2-D kernel shapes.

Every parameter is float32 and carries logical axis names (`nn.with_logical_partitioning`) so the
partitioner can shard it; activations run in the config dtype and carry logical constraints.
The math follows the published T5 models exactly: RMS norm in float32, no 1/sqrt(d) attention
scaling (it lives in the query initializer), bucketed relative position biases, gated or plain
MLPs. The attention layer, with its key/value cache, is in attention_layer.py.
"""

from __future__ import annotations

import math

import flax.linen as nn
import jax
import jax.numpy as jnp

from t5forge.errors import ConfigError
from t5forge.models import axes
from t5forge.models.products import dense_product, fast_forms_apply
from t5forge.models.quantized import Int8Kernel
from t5forge.models.transposed import TransposedKernel

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
        kernel = self.get_variable("params", "kernel")
        stored_otherwise = isinstance(kernel, TransposedKernel) or (
            isinstance(kernel, Int8Kernel) and kernel.packed is not None
        )
        if not stored_otherwise:
            # flax checks an existing parameter's first leaf against the initializer's shape;
            # a packed int8 kernel keeps its values' shape only as metadata (quantized.py), and
            # a transposed one holds it transposed (transposed.py).
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
    return list(_unstack(fused))


@jax.custom_vjp
def _unstack(stacked):
    """The projections [..., n, out] as n arrays. Its gradient is one stack of theirs; the
    slices' own gradient is a pad and an add per projection, which cost XLA:CPU 59 ms against
    7 ms for q/k/v of T5 1.1 small's bf16 train step (docs/cpu-products.md)."""
    return tuple(stacked[..., i, :] for i in range(stacked.shape[-2]))


def _unstack_forward(stacked):
    return _unstack(stacked), None


def _unstack_backward(_, grads):
    return (jnp.stack(grads, axis=-2),)


_unstack.defvjp(_unstack_forward, _unstack_backward)


def stacked_name(names) -> str:
    """The parameter name under which `names`' kernels are kept stacked ahead of time."""
    return "+".join(names)


def _stack(kernels: list) -> jnp.ndarray:
    """Kernels [..., in, out] of one input as one: [..., in, n, out], or [..., in, sum(out)]
    if widths differ (a leading axis is scanned layers'); an Int8Kernel's values and scales
    alike."""
    if isinstance(kernels[0], TransposedKernel):
        raise ConfigError(
            "bfloat16 kernels stored transposed at load cannot be stacked at run time; "
            "load the checkpoint again with weights_dtype='bfloat16'"
        )
    if isinstance(kernels[0], Int8Kernel) and any(k.packed is not None for k in kernels):
        # Packed at load, they keep no plain values to stack: stack_projections stacks every
        # fused group before pack_kernels runs.
        raise ConfigError(
            "int8 kernels packed at load cannot be stacked at run time; "
            "load the checkpoint again with weights_dtype='int8'"
        )
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
        if stacked_name(group) in params:  # made already (int8 weights packed at load)
            continue
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
        # XLA:CPU runs bfloat16 elementwise math through converts: the gated GELU's backward
        # cost 84 ms per layer in bfloat16 against 24 ms in float32 (docs/cpu-products.md).
        # Elsewhere (and in float32) the activation runs in the layer's dtype, as T5X's does.
        math_dtype = jnp.float32 if fast_forms_apply(self.dtype) else self.dtype
        hidden = None
        for name, h in zip(self.activations, projections, strict=True):
            h = activation_fn(name)(h.astype(math_dtype))
            hidden = h if hidden is None else hidden * h
        hidden = hidden.astype(self.dtype)
        hidden = constrain(hidden, axes.BATCH, axes.LENGTH, axes.MLP)
        hidden = Dropout(self.dropout_rate, broadcast_dims=(-2,))(
            hidden, deterministic=deterministic
        )
        return Dense(self.emb_dim, (axes.MLP, axes.EMBED), self.dtype, name="wo")(hidden)
