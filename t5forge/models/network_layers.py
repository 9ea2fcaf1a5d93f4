"""The encoder and decoder layers of the T5 networks, and how a call uses the decoding cache.

One layer is what a stack repeats (or scans): pre-norm attention and MLP blocks with residual
connections, in every family's variant (post-norms, sliding windows, per-layer relative
biases, sparse MLPs, LongT5's attention). network.py stacks them into encoders and decoders.
"""

from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp

from t5forge.models import axes
from t5forge.models.attention_layer import MultiHeadAttention
from t5forge.models.configs import FULL_ATTENTION, SLIDING_ATTENTION, T5Config
from t5forge.models.layers import (
    Dropout,
    MlpBlock,
    RelativePositionBias,
    RMSNorm,
    constrain,
    mask_to_bias,
)
from t5forge.models.long_attention import LongSelfAttention
from t5forge.models.masks import sliding_window_mask
from t5forge.models.moe import SparseMlp

# decode_mode values: how a call uses the key/value cache (network.py's docstring says each).
TEACHER_FORCED, INIT_CACHE, PREFILL, DECODE_STEP = "none", "init", "prefill", "step"
DECODE_MODES = (TEACHER_FORCED, INIT_CACHE, PREFILL, DECODE_STEP)
# The decoder layers' attention over the encoder output (T5X's module name).
CROSS_ATTENTION = "encoder_decoder_attention"


def compute_dtype(config: T5Config):
    return jnp.dtype(config.dtype)


def _dropout(config: T5Config, x, deterministic: bool):
    # T5X shares one dropout mask along the length axis.
    return Dropout(config.dropout_rate, broadcast_dims=(-2,))(x, deterministic=deterministic)


def _attention(
    config: T5Config,
    name: str,
    rotary: bool = True,
    kind: str = FULL_ATTENTION,
    module: type[MultiHeadAttention] = MultiHeadAttention,
    **module_fields,
) -> MultiHeadAttention:
    """An attention layer of a `kind` layer; `rotary` False for cross-attention, which RoPE
    leaves alone. Sliding layers rotate by rope_local_theta where it is set; full ones scale
    by rope_linear_factor. `module` (with
    its own `module_fields`) is MultiHeadAttention or a subclass of it."""
    scalar = config.query_pre_attn_scalar
    theta, linear_factor = config.rope_theta, config.rope_linear_factor
    if kind == SLIDING_ATTENTION:
        linear_factor = None
        if config.rope_local_theta is not None:
            theta = config.rope_local_theta
    return module(
        config.emb_dim,
        config.num_heads,
        config.head_dim,
        config.dropout_rate,
        compute_dtype(config),
        config.attention_implementation,
        config.scale_attn_logits,
        num_kv_heads=config.num_kv_heads,
        query_scale=None if scalar is None else scalar**-0.5,
        softcap=config.attn_logit_softcap,
        rope_theta=theta if rotary else None,
        rope_linear_factor=linear_factor if rotary else None,
        qk_norm=config.qk_norm,
        norm_epsilon=config.layer_norm_epsilon,
        zero_centered_norm=config.zero_centered_norm,
        name=name,
        **module_fields,
    )


def _encoder_attention(config: T5Config, kind: str) -> MultiHeadAttention:
    """An encoder layer's self-attention: T5's, or LongT5's local or transient-global one."""
    if not config.is_long_encoder:
        return _attention(config, "attention", kind=kind)
    return _attention(
        config,
        "attention",
        module=LongSelfAttention,
        kind=config.encoder_attention,
        local_radius=config.local_radius,
    )


def layer_norm(config: T5Config, name: str | None = None) -> RMSNorm:
    return RMSNorm(
        compute_dtype(config), config.layer_norm_epsilon, config.zero_centered_norm, name=name
    )


def _post_norm(config: T5Config, name: str, h):
    """Gemma's norm of a block's output before the residual add (identity without post_norms)."""
    return layer_norm(config, name)(h) if config.post_norms else h


def _with_window(config: T5Config, kind: str, bias, query_positions, key_positions, causal):
    """Restricts a sliding layer's attention bias to its window (masks.py)."""
    if kind != SLIDING_ATTENTION:
        return bias
    split = config.encoder_window == "split"
    window = sliding_window_mask(
        query_positions, key_positions, config.sliding_window, causal, split
    )
    return bias + mask_to_bias(window)


def _mlp(config: T5Config, name: str = "mlp") -> MlpBlock:
    return MlpBlock(
        config.emb_dim,
        config.mlp_dim,
        config.mlp_activations,
        config.dropout_rate,
        compute_dtype(config),
        name=name,
    )


def _mlp_blocks(config: T5Config, stack: str, sparse: bool, x, deterministic: bool):
    """The layer's MLP part after its attention: pre-norm MLP (a mixture of experts in a sparse
    layer, models/moe.py) and residual, then in a sparse layer with sparse_extra_mlp ST-MoE's
    dense MLP (Flaxformer's `extra_mlp`) with its own norm and residual."""
    if sparse:
        mlp = SparseMlp(
            config,
            getattr(config, f"{stack}_router"),
            getattr(config, f"{stack}_batch_prioritized_routing"),
            name="mlp",
        )
    else:
        mlp = _mlp(config)
    h = layer_norm(config, "pre_mlp_layer_norm")(x)
    h = _post_norm(config, "post_mlp_layer_norm", mlp(h, deterministic))
    x = x + _dropout(config, h, deterministic)
    if sparse and config.sparse_extra_mlp:
        h = _mlp(config, "extra_mlp")(
            layer_norm(config, "pre_extra_mlp_layer_norm")(x), deterministic
        )
        x = x + _dropout(config, h, deterministic)
    return constrain(x, axes.BATCH, axes.LENGTH, axes.EMBED)


def relative_bias(config: T5Config, bidirectional: bool, name: str | None = None):
    return RelativePositionBias(
        config.num_heads,
        config.relative_attention_num_buckets,
        config.relative_attention_max_distance,
        bidirectional,
        name=name,
    )


def _with_layer_relpos(config: T5Config, bias, bidirectional, query_positions, key_positions):
    """Adds this layer's own relative position bias (umT5); shared tables are added per stack."""
    if not config.relative_attention_per_layer or config.rope_theta is not None:
        return bias
    table = relative_bias(config, bidirectional, name="relpos_bias")
    return bias + table(query_positions, key_positions).astype(jnp.float32)


def _layer_output(config: T5Config, y):
    # nn.scan wants (carry, per-layer output); the unscanned stack wants the activations.
    return (y, None) if config.scan_layers else y


class EncoderLayer(nn.Module):
    """Pre-norm self-attention and MLP blocks with residual connections."""

    config: T5Config
    deterministic: bool = True
    attention_kind: str = FULL_ATTENTION
    sparse: bool = False  # a mixture-of-experts MLP (T5Config.sparse_layers)

    @nn.compact
    def __call__(self, x, bias, rope_positions):
        cfg, det = self.config, self.deterministic
        positions = jnp.arange(x.shape[1])
        bias = _with_layer_relpos(cfg, bias, True, positions, positions)
        bias = _with_window(cfg, self.attention_kind, bias, positions, positions, causal=False)
        x = constrain(x, axes.BATCH, axes.LENGTH, axes.EMBED)
        h = layer_norm(cfg, "pre_attention_layer_norm")(x)
        attention = _encoder_attention(cfg, self.attention_kind)
        if cfg.is_long_encoder:  # `bias` is the stack's long_attention.LongBias
            h = attention(h, bias, det)
        else:
            h = attention(h, h, bias, det, rope_positions)
        h = _post_norm(cfg, "post_attention_layer_norm", h)
        x = x + _dropout(cfg, h, det)
        x = _mlp_blocks(cfg, "encoder", self.sparse, x, det)
        return _layer_output(cfg, x)


class DecoderLayer(nn.Module):
    """Pre-norm causal self-attention, optional cross-attention, and MLP blocks."""

    config: T5Config
    deterministic: bool = True
    decode_mode: str = TEACHER_FORCED
    cache_length: int = 0
    attention_kind: str = FULL_ATTENTION
    sparse: bool = False  # a mixture-of-experts MLP (T5Config.sparse_layers)
    # A decoding step of one row: self-attention reads its cache through a select of the new
    # position (MultiHeadAttention.decode_step), which XLA does not copy as it copies a lone
    # row's written cache. Rows decoded together write in place, and keep reading the writes.
    select_cache_reads: bool = False

    @nn.compact
    def __call__(self, x, encoded, self_bias, cross_bias, index, write, rope_positions):
        cfg, det, mode = self.config, self.deterministic, self.decode_mode
        merged = cfg.merged_attention
        cross = not cfg.is_decoder_only and not merged
        self_attention = _attention(cfg, "self_attention", kind=self.attention_kind)
        cross_attention = _attention(cfg, CROSS_ATTENTION, rotary=False) if cross else None
        if mode == INIT_CACHE:
            if merged:
                self_attention.fill_merged_cache(encoded, encoded.shape[0], self.cache_length)
            else:
                self_attention.zero_cache(encoded.shape[0], self.cache_length)
                cross_attention.fill_cache(encoded)
            return _layer_output(cfg, x)

        if mode == DECODE_STEP:
            query_positions = jnp.reshape(index, (1,))
            key_positions = jnp.arange(self.cache_length)
        else:
            query_positions = key_positions = jnp.arange(x.shape[1])
        self_bias = _with_layer_relpos(cfg, self_bias, False, query_positions, key_positions)
        self_bias = _with_window(
            cfg, self.attention_kind, self_bias, query_positions, key_positions, causal=True
        )
        x = constrain(x, axes.BATCH, axes.LENGTH, axes.EMBED)
        h = layer_norm(cfg, "pre_self_attention_layer_norm")(x)
        if merged and mode == DECODE_STEP:
            h = self_attention.merged_step(
                h, self_bias, cross_bias, index, write, self.select_cache_reads
            )
        elif merged:
            h = self_attention.merged(h, encoded, self_bias, cross_bias, det, rope_positions)
        elif mode == DECODE_STEP:
            h = self_attention.decode_step(h, self_bias, index, write, self.select_cache_reads)
        elif mode == PREFILL:
            h = self_attention.prefill(h, self_bias, det, rope_positions)
        else:
            h = self_attention(h, h, self_bias, det, rope_positions)
        h = _post_norm(cfg, "post_self_attention_layer_norm", h)
        x = x + _dropout(cfg, h, det)
        if cross:
            h = layer_norm(cfg, "pre_cross_attention_layer_norm")(x)
            if mode == DECODE_STEP:
                h = cross_attention.decode_step(h, cross_bias)
            else:
                h = cross_attention(h, encoded, cross_bias, det)
            h = _post_norm(cfg, "post_cross_attention_layer_norm", h)
            x = x + _dropout(cfg, h, det)
        x = _mlp_blocks(cfg, "decoder", self.sparse, x, det)
        return _layer_output(cfg, x)
