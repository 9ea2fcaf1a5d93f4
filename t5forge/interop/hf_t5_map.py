"""T5's Hugging Face tensor map: which transformers tensor is which T5X parameter.

huggingface.py converts T5 and mT5 by it; families built on T5's layers (hf_switch.py's Switch
Transformers) reuse it with their own MLP entries. Each entry is (HF name, T5X path, T5X
shape, whether HF holds it transposed), as hf_tensor_map.py walks them.
"""

from __future__ import annotations

from collections.abc import Iterator

from t5forge.errors import ConfigError
from t5forge.models.configs import T5Config
from t5forge.models.long_attention import GLOBAL_NORM_NAME

# T5Config.encoder_attention <-> (LongT5's encoder_attention_type, HF's attention module name).
ENCODER_ATTENTIONS = {
    "full": (None, "SelfAttention"),
    "local": ("local", "LocalSelfAttention"),
    "transient_global": ("transient-global", "TransientGlobalSelfAttention"),
}


def mlp_entries(hf_prefix: str, t5x_prefix: tuple, config: T5Config) -> Iterator[tuple]:
    """A dense MLP's wi (or wi_0, wi_1) and wo."""
    gated = len(config.mlp_activations) > 1
    names = [f"wi_{i}" for i in range(len(config.mlp_activations))] if gated else ["wi"]
    for name in names:
        yield (
            f"{hf_prefix}.{name}.weight",
            t5x_prefix + (name, "kernel"),
            (config.emb_dim, config.mlp_dim),
            True,
        )
    yield (
        f"{hf_prefix}.wo.weight",
        t5x_prefix + ("wo", "kernel"),
        (config.mlp_dim, config.emb_dim),
        True,
    )


def attention_entries(hf_prefix: str, t5x_prefix: tuple, config: T5Config) -> Iterator[tuple]:
    inner = config.num_heads * config.head_dim
    for hf_name, t5x_name in (("q", "query"), ("k", "key"), ("v", "value")):
        yield (
            f"{hf_prefix}.{hf_name}.weight",
            t5x_prefix + (t5x_name, "kernel"),
            (config.emb_dim, inner),
            True,
        )
    yield (f"{hf_prefix}.o.weight", t5x_prefix + ("out", "kernel"), (inner, config.emb_dim), True)


def norm_entry(hf_name: str, t5x_prefix: tuple, config: T5Config) -> tuple:
    return (hf_name, t5x_prefix + ("scale",), (config.emb_dim,), False)


def tensor_map(config: T5Config, mlp=None) -> list[tuple[str, tuple, tuple, bool]]:
    """(HF name, T5X path, T5X shape, whether HF holds it transposed) for each tensor of `config`.

    HF linear weights are [out, in] where T5X kernels are [in, out]; HF's relative bias is an
    embedding [buckets, heads] where T5X's is [heads, buckets]; the token embedding agrees.
    `mlp(hf_sublayer, t5x_layer, stack, index, config)` gives a layer's MLP entries where a family
    names them otherwise (hf_sublayer is e.g. 'encoder.block.0.layer.1'); T5's is
    `DenseReluDense`.
    """
    mlp = mlp or _t5_mlp
    if config.is_decoder_only:
        raise ConfigError(
            "Hugging Face T5 has no decoder-only model; only encoder_decoder "
            "configs convert to or from transformers"
        )
    relpos_shape = (config.num_heads, config.relative_attention_num_buckets)
    encoder_attention = ENCODER_ATTENTIONS[config.encoder_attention][1]
    self_attentions = {"encoder": encoder_attention, "decoder": "SelfAttention"}
    entries = [
        (
            "shared.weight",
            ("token_embedder", "embedding"),
            (config.vocab_size, config.emb_dim),
            False,
        )
    ]
    stacks = (("encoder", config.num_encoder_layers), ("decoder", config.num_decoder_layers))
    for stack, num_layers in stacks:
        entries.append(
            (
                f"{stack}.block.0.layer.0.{self_attentions[stack]}.relative_attention_bias.weight",
                (stack, "relpos_bias", "rel_embedding"),
                relpos_shape,
                True,
            )
        )
        for i in range(num_layers):
            block, layer = f"{stack}.block.{i}.layer", (stack, f"layers_{i}")
            if stack == "encoder":
                sublayers = (("pre_attention_layer_norm", "attention", encoder_attention),)
            else:
                sublayers = (
                    ("pre_self_attention_layer_norm", "self_attention", "SelfAttention"),
                    (
                        "pre_cross_attention_layer_norm",
                        "encoder_decoder_attention",
                        "EncDecAttention",
                    ),
                )
            for index, (norm, attention, hf_attention) in enumerate(sublayers):
                entries.append(
                    norm_entry(f"{block}.{index}.layer_norm.weight", layer + (norm,), config)
                )
                entries.extend(
                    attention_entries(
                        f"{block}.{index}.{hf_attention}", layer + (attention,), config
                    )
                )
            mlp_index = len(sublayers)
            entries.append(
                norm_entry(
                    f"{block}.{mlp_index}.layer_norm.weight",
                    layer + ("pre_mlp_layer_norm",),
                    config,
                )
            )
            entries.extend(mlp(f"{block}.{mlp_index}", layer, stack, i, config))
        entries.append(
            norm_entry(f"{stack}.final_layer_norm.weight", (stack, f"{stack}_norm"), config)
        )
    if config.encoder_attention == "transient_global":
        entries.extend(_transient_global_entries(config, relpos_shape))
    if not config.logits_via_embedding:
        entries.append(
            (
                "lm_head.weight",
                ("decoder", "logits_dense", "kernel"),
                (config.emb_dim, config.vocab_size),
                True,
            )
        )
    return entries


def _t5_mlp(hf_sublayer: str, layer: tuple, stack: str, index: int, config: T5Config):
    return mlp_entries(f"{hf_sublayer}.DenseReluDense", layer + ("mlp",), config)


def _transient_global_entries(config: T5Config, relpos_shape: tuple) -> Iterator[tuple]:
    """LongT5's transient-global tensors: the side relative bias (block 0, shared by the
    stack) and each layer's norm of the global tokens."""
    prefix = "encoder.block.{}.layer.0.TransientGlobalSelfAttention"
    yield (
        f"{prefix.format(0)}.global_relative_attention_bias.weight",
        ("encoder", "side_relpos_bias", "rel_embedding"),
        relpos_shape,
        True,
    )
    for i in range(config.num_encoder_layers):
        path = ("encoder", f"layers_{i}", "attention", GLOBAL_NORM_NAME)
        yield norm_entry(f"{prefix.format(i)}.global_input_layer_norm.weight", path, config)
