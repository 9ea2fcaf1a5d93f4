"""The T5 networks: encoder and decoder stacks, EncoderDecoder and DecoderOnly (flax.linen).

Parameter paths equal T5X's (`encoder/layers_0/attention/query/kernel`, ...) so T5X and Hugging
Face checkpoints map onto them 1:1. With `scan_layers` the layers of a stack become one scanned
module `layers` whose params gain a 'layers' axis at position 1 (T5X's scanned layout; see
param_layout.py for the conversion). A network instance is built for one purpose, named by
`decode_mode`: 'none' (teacher-forced forward, training and scoring), 'init' (create the
decoding cache of an encoder-decoder: empty self-attention slots plus cross-attention keys and
values computed once from the encoder output), 'prefill' (decoder-only: run the prompt and keep
its keys/values) and 'step' (one cached decoding position).
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from t5forge.models import axes, products
from t5forge.models.attention import soft_cap
from t5forge.models.configs import TRANSIENT_GLOBAL_ATTENTION, T5Config
from t5forge.models.layers import (
    Dense,
    Dropout,
    Embed,
    constrain,
    decoder_self_mask,
    mask_to_bias,
    pairwise_mask,
)
from t5forge.models.long_attention import long_attention_bias
from t5forge.models.network_layers import (
    DECODE_MODES,
    PREFILL,
    TEACHER_FORCED,
    DecoderLayer,
    EncoderLayer,
    compute_dtype,
    layer_norm,
    relative_bias,
)
from t5forge.models.rope import segment_positions

# What a rematerialized layer saves for the backward pass (the rest is recomputed):
# 'minimal' keeps the weight matmuls' outputs (not the attention logits, which have batch dims),
# 'proj' only the q/k/v projections, 'dots_saveable' every matmul output, 'full' nothing.
# bfloat16 products on CPU are custom_vjp calls that jax's dot policies cannot see
# (products.py); their outputs are named, and the dot policies save those names too.
_policies = jax.checkpoint_policies
_REMAT_SAVE_POLICIES = {
    "minimal": _policies.save_from_both_policies(
        _policies.checkpoint_dots_with_no_batch_dims,
        _policies.save_only_these_names(products.DENSE_PRODUCT),
    ),
    "proj": _policies.save_only_these_names("query_proj", "key_proj", "value_proj"),
    "dots_saveable": _policies.save_from_both_policies(
        _policies.dots_saveable,
        _policies.save_only_these_names(products.DENSE_PRODUCT, products.EINSUM_PRODUCT),
    ),
    "full": None,
}


def _with_stack_relpos(stack: nn.Module, bias, query_positions, key_positions):
    """Adds the stack's shared relative position bias (all families but umT5 and RoPE ones)."""
    if stack.config.relative_attention_per_layer or stack.config.rope_theta is not None:
        return bias
    return bias + stack.relpos_bias(query_positions, key_positions).astype(jnp.float32)


def _layer_stack(
    config: T5Config,
    layer_cls,
    stack: str,
    num_args: int,
    checkpointed: bool,
    **layer_kwargs,
):
    """The layers of `stack` ('encoder' or 'decoder'), each with its attention kind and dense or
    sparse MLP: `layers_0..N-1`, or one scanned `layers` module (whose layers share one kind
    and one MLP form: T5Config refuses a mix). A scanned stack's sown router statistics gain
    a leading layer axis.

    Rematerialization wraps the layer when training with a remat policy; under scan the params
    (and decoding caches) are stacked along axis 1, the 'layers' logical axis.
    """
    if checkpointed and config.remat_policy != "none":
        layer_cls = nn.remat(
            layer_cls,
            policy=_REMAT_SAVE_POLICIES[config.remat_policy],
            prevent_cse=not config.scan_layers,
        )
    kinds, sparse = config.layer_types(stack), config.sparse_layers(stack)
    if not config.scan_layers:
        return [
            layer_cls(
                config, name=f"layers_{i}", attention_kind=kind, sparse=is_sparse, **layer_kwargs
            )
            for i, (kind, is_sparse) in enumerate(zip(kinds, sparse, strict=True))
        ]
    scanned = nn.scan(
        layer_cls,
        variable_axes={"params": 1, "cache": 1, "intermediates": 0},
        split_rngs={"params": True, "dropout": True},
        in_axes=(nn.broadcast,) * num_args,
        length=len(kinds),
        metadata_params={nn.PARTITION_NAME: axes.LAYERS},
    )
    return scanned(config, name="layers", attention_kind=kinds[0], sparse=sparse[0], **layer_kwargs)


def _run_stack(config: T5Config, layers, x, *args):
    if config.scan_layers:
        return layers(x, *args)[0]
    for layer in layers:
        x = layer(x, *args)
    return x


def _uses_stack_relpos(config: T5Config) -> bool:
    return not config.relative_attention_per_layer and config.rope_theta is None


def _embedder(config: T5Config) -> Embed:
    """A token embedding: the shared one, or a stack's own (`<stack>/token_embedder`)."""
    return Embed(
        config.vocab_size,
        config.emb_dim,
        compute_dtype(config),
        config.scale_embeddings,
        config.eoi_token_id,
    )


def _rope_positions(length: int, segment_ids):
    """What RoPE rotates by: each token's position inside its segment when packed."""
    return jnp.arange(length) if segment_ids is None else segment_positions(segment_ids)


class Encoder(nn.Module):
    """Embeds the inputs and runs the bidirectional stack; one relative bias for all layers.

    `config` is the whole network's; the encoder runs with its encoder_config() widths.
    """

    config: T5Config
    embed: nn.Module | None  # None: the encoder's own (separate_embeddings)
    deterministic: bool = True

    def setup(self):
        cfg = self.config.encoder_config()
        if _uses_stack_relpos(cfg):
            self.relpos_bias = relative_bias(cfg, bidirectional=True)
        if cfg.encoder_attention == TRANSIENT_GLOBAL_ATTENTION:
            self.side_relpos_bias = relative_bias(cfg, bidirectional=True)
        if self.embed is None:
            self.token_embedder = _embedder(cfg)
        self.layers = _layer_stack(
            cfg,
            EncoderLayer,
            "encoder",
            2,
            checkpointed=True,
            deterministic=self.deterministic,
        )
        self.encoder_norm = layer_norm(cfg)
        self.embed_dropout = Dropout(cfg.dropout_rate, broadcast_dims=(-2,))
        self.output_dropout = Dropout(cfg.dropout_rate, broadcast_dims=(-2,))

    def __call__(self, tokens, segment_ids=None):
        """tokens [B, S] (0 = padding) -> encoded [B, S, emb_dim] in the activation dtype."""
        det = self.deterministic
        embed = self.token_embedder if self.embed is None else self.embed
        x = self.embed_dropout(embed(tokens), deterministic=det)
        rope_positions = _rope_positions(tokens.shape[1], segment_ids)
        x = _run_stack(self.config, self.layers, x, self._bias(tokens, segment_ids), rope_positions)
        x = self.encoder_norm(x)
        return self.output_dropout(x, deterministic=det)

    def _bias(self, tokens, segment_ids):
        """What every layer adds to its attention logits: the padding (and packing) mask plus
        the relative position bias, [B, heads, S, S], or LongT5's blocked LongBias."""
        cfg = self.config.encoder_config()
        if cfg.is_long_encoder:
            side = getattr(self, "side_relpos_bias", None)
            return long_attention_bias(cfg, self.relpos_bias, side, tokens > 0, segment_ids)
        positions = jnp.arange(tokens.shape[1])
        mask = pairwise_mask(tokens > 0, tokens > 0)
        if segment_ids is not None:
            mask = jnp.logical_and(mask, pairwise_mask(segment_ids, segment_ids, jnp.equal))
        # Relative positions are shift-invariant, so packed segments need no per-token positions.
        return _with_stack_relpos(self, mask_to_bias(mask), positions, positions)


class Decoder(nn.Module):
    """The causal stack and output logits; `decode_mode` picks forward, cache init or one step."""

    config: T5Config
    embed: nn.Module | None  # None: the decoder's own (separate_embeddings)
    deterministic: bool = True
    decode_mode: str = TEACHER_FORCED
    cache_length: int = 0
    select_cache_reads: bool = False  # see DecoderLayer

    def setup(self):
        cfg = self.config
        if _uses_stack_relpos(cfg):
            self.relpos_bias = relative_bias(cfg, bidirectional=False)
        if self.embed is None:
            self.token_embedder = _embedder(cfg)
        self.layers = _layer_stack(
            cfg,
            DecoderLayer,
            "decoder",
            6,
            checkpointed=self.decode_mode == TEACHER_FORCED,
            deterministic=self.deterministic,
            decode_mode=self.decode_mode,
            cache_length=self.cache_length,
            select_cache_reads=self.select_cache_reads,
        )
        self.decoder_norm = layer_norm(cfg)
        self.embed_dropout = Dropout(cfg.dropout_rate, broadcast_dims=(-2,))
        self.output_dropout = Dropout(cfg.dropout_rate, broadcast_dims=(-2,))
        if not cfg.logits_via_embedding:
            self.logits_dense = Dense(cfg.vocab_size, (axes.EMBED, axes.VOCAB), jnp.float32)

    def _embed(self, tokens, first):
        """Token vectors; T5X's shifted-right 0 where `first` (a sequence's or segment's first
        position) is embedded as the decoder start token."""
        start = self.config.decoder_start_token_id
        if start:
            tokens = jnp.where(jnp.logical_and(first, tokens == 0), start, tokens)
        return (self.token_embedder if self.embed is None else self.embed)(tokens)

    def _logits(self, y):
        y = self.decoder_norm(y)
        y = self.output_dropout(y, deterministic=self.deterministic)
        if self.config.logits_via_embedding:
            embed = self.token_embedder if self.embed is None else self.embed
            logits = embed.attend(y)
        else:
            logits = self.logits_dense(y)
        if self.config.logits_scaled:
            logits = logits / jnp.sqrt(jnp.float32(y.shape[-1]))
        logits = soft_cap(logits, self.config.final_logit_softcap)
        return constrain(logits, axes.BATCH, axes.LENGTH, axes.VOCAB)

    def __call__(self, tokens, encoded=None, self_mask=None, cross_mask=None, segment_ids=None):
        """Teacher-forced (or prefill) logits [B, T, vocab] float32 for tokens [B, T]."""
        rope_positions = _rope_positions(tokens.shape[1], segment_ids)
        y = self._embed(tokens, rope_positions == 0)
        y = self.embed_dropout(y, deterministic=self.deterministic)
        positions = jnp.arange(tokens.shape[1])
        self_bias = _with_stack_relpos(self, mask_to_bias(self_mask), positions, positions)
        cross_bias = None if cross_mask is None else mask_to_bias(cross_mask)
        y = _run_stack(
            self.config, self.layers, y, encoded, self_bias, cross_bias, None, None, rope_positions
        )
        if self.decode_mode == PREFILL:
            return None
        return self._logits(y)

    def init_cache(self, encoded):
        """Creates the self-attention slots and the cross-attention keys/values (mode 'init')."""
        carry = jnp.zeros((encoded.shape[0], 1, self.config.emb_dim), encoded.dtype)
        _run_stack(self.config, self.layers, carry, encoded, None, None, None, None, None)

    def step(self, tokens, index, encoder_valid=None, write=None, lineage=None):
        """Logits [B, 1, vocab] for the tokens [B, 1] at position `index` (mode 'step').

        `lineage` (int32[G, S, L], decoding.DecodingCache) says which row of its group of S
        wrote each position a row attends to; without it every row reads its own cache.
        """
        y = self._embed(tokens, index == 0)
        key_positions = jnp.arange(self.cache_length)
        visible = (key_positions <= index)[None, None, None, :]
        self_bias = _with_stack_relpos(
            self, mask_to_bias(visible), jnp.reshape(index, (1,)), key_positions
        )
        # slot_attention's bias: [groups or 1, slots, heads, queries or 1, length].
        self_bias = self_bias[:, None]
        if lineage is not None and lineage.shape[1] > 1:
            slots = jnp.arange(lineage.shape[1], dtype=lineage.dtype)[None, :, None, None]
            written_by = mask_to_bias(lineage[:, None] == slots)  # [G, S, queries, L]
            self_bias = self_bias + written_by[:, :, None]
        cross_bias = None
        if encoder_valid is not None:
            cross_bias = mask_to_bias(encoder_valid.astype(bool)[:, None, None, :])
        y = _run_stack(self.config, self.layers, y, None, self_bias, cross_bias, index, write, None)
        return self._logits(y)


class _Network(nn.Module):
    """What both network kinds share: their mode fields, the token embedding and the decoder."""

    config: T5Config
    deterministic: bool = True
    decode_mode: str = TEACHER_FORCED
    cache_length: int = 0
    select_cache_reads: bool = False  # see DecoderLayer

    def setup(self):
        if self.decode_mode not in DECODE_MODES:
            raise ValueError(f"decode_mode must be one of {DECODE_MODES}, got {self.decode_mode!r}")
        cfg = self.config
        shared = None
        if not cfg.separate_embeddings:
            self.token_embedder = _embedder(cfg)
            shared = self.token_embedder
        self.decoder = Decoder(
            cfg,
            shared,
            self.deterministic,
            self.decode_mode,
            self.cache_length,
            self.select_cache_reads,
        )


class EncoderDecoder(_Network):
    """T5: a token embedding (shared, or one per stack), an encoder, and a decoder over it."""

    def setup(self):
        super().setup()
        shared = None if self.config.separate_embeddings else self.token_embedder
        self.encoder = Encoder(self.config, shared, self.deterministic)

    def encode(self, encoder_input_tokens, encoder_segment_ids=None):
        """Encoder output [B, S, emb_dim]."""
        return self.encoder(encoder_input_tokens, encoder_segment_ids)

    def decode(
        self,
        encoded,
        encoder_input_tokens,
        decoder_input_tokens,
        decoder_target_tokens,
        encoder_segment_ids=None,
        decoder_segment_ids=None,
    ):
        """Teacher-forced decoder logits given the encoder output."""
        target_valid = decoder_target_tokens > 0
        self_mask = decoder_self_mask(
            decoder_input_tokens.shape[1], target_valid, decoder_segment_ids
        )
        cross_mask = pairwise_mask(target_valid, encoder_input_tokens > 0)
        if encoder_segment_ids is not None:
            cross_mask = jnp.logical_and(
                cross_mask, pairwise_mask(decoder_segment_ids, encoder_segment_ids, jnp.equal)
            )
        return self.decoder(
            decoder_input_tokens, encoded, self_mask, cross_mask, decoder_segment_ids
        )

    def __call__(
        self,
        encoder_input_tokens,
        decoder_input_tokens,
        decoder_target_tokens,
        encoder_segment_ids=None,
        decoder_segment_ids=None,
    ):
        """Logits [B, T, vocab] float32 of a (possibly packed) batch."""
        encoded = self.encode(encoder_input_tokens, encoder_segment_ids)
        return self.decode(
            encoded,
            encoder_input_tokens,
            decoder_input_tokens,
            decoder_target_tokens,
            encoder_segment_ids,
            decoder_segment_ids,
        )

    def init_cache(self, encoder_input_tokens):
        """Encodes once and fills the decoding cache ('init' mode, mutable 'cache')."""
        self.decoder.init_cache(self.encode(encoder_input_tokens))

    def decode_step(self, tokens, index, encoder_valid, lineage=None):
        """One cached decoding step ('step' mode): logits [B, 1, vocab]."""
        return self.decoder.step(tokens, index, encoder_valid=encoder_valid, lineage=lineage)


class DecoderOnly(_Network):
    """A causal language model (prefix-LM when `decoder_causal_attention` marks a prefix)."""

    def __call__(
        self,
        decoder_input_tokens,
        decoder_target_tokens,
        decoder_segment_ids=None,
        decoder_causal_attention=None,
    ):
        """Logits [B, T, vocab] float32; the prefix marked by causal_attention is bidirectional."""
        self_mask = decoder_self_mask(
            decoder_input_tokens.shape[1],
            decoder_target_tokens > 0,
            decoder_segment_ids,
            decoder_causal_attention,
        )
        return self.decoder(decoder_input_tokens, None, self_mask, None, decoder_segment_ids)

    def prefill(self, decoder_input_tokens, decoder_causal_attention):
        """Runs the prompt [B, L] ('prefill' mode) so its keys/values become the cache."""
        self_mask = decoder_self_mask(
            decoder_input_tokens.shape[1], causal_attention=decoder_causal_attention
        )
        self.decoder(decoder_input_tokens, None, self_mask)

    def decode_step(self, tokens, index, write, lineage=None):
        """One cached decoding step ('step' mode); rows with write=False keep prefill keys."""
        return self.decoder.step(tokens, index, write=write, lineage=lineage)


def build_network(config: T5Config, **mode) -> nn.Module:
    """The flax module for `config` (`mode`: deterministic, decode_mode, cache_length,
    select_cache_reads)."""
    network_cls = DecoderOnly if config.is_decoder_only else EncoderDecoder
    return network_cls(config, **mode)
