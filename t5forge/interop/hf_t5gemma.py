"""Hugging Face `transformers` T5Gemma checkpoints (model_type 't5gemma') <-> t5forge, both ways.

T5Gemma is a Gemma 2 encoder and a Gemma 2 decoder: grouped-query attention with RoPE, Gemma's
attention scale and logit soft-caps, alternating sliding-window and full layers, `(1 + w)`
RMSNorms before and after every block, one embedding per stack scaled by sqrt(width), and a
head tied to the decoder's embedding without T5's 1/sqrt(d). Its decoder starts at bos (2).
transformers keeps the encoder's and decoder's hyperparameters in two sub-configs; t5forge
holds the decoder's in T5Config and the encoder's differing widths in `encoder_overrides`.
The tensors map 1:1 (linear weights transposed); the walk over them is hf_tensor_map.py's.
"""

from __future__ import annotations

from collections.abc import Iterator

from t5forge.errors import ConfigError
from t5forge.interop.hf_tensor_map import params_from_entries, state_dict_from_entries
from t5forge.models.configs import SLIDING_ATTENTION, T5Config

MODEL_TYPE = "t5gemma"
TOKENIZER_FILE = "tokenizer.model"  # Gemma's SentencePiece model
_ACTIVATION = "gelu_pytorch_tanh"  # the tanh GELU: T5X's "gelu"
_MLP_ACTIVATIONS = ("gelu", "linear")
# What a Gemma stack's sub-config says about the whole network, which t5forge holds once.
_SHARED_BY_STACKS = (
    "vocab_size",
    "query_pre_attn_scalar",
    "attn_logit_softcapping",
    "sliding_window",
    "rms_norm_eps",
)
_PAD_ID, _EOS_ID = 0, 1  # what t5forge's masks and decoding loops assume
# T5Config field <- Gemma sub-config key, for the widths a stack may have of its own.
_WIDTHS = {
    "emb_dim": "hidden_size",
    "num_heads": "num_attention_heads",
    "num_kv_heads": "num_key_value_heads",
    "head_dim": "head_dim",
    "mlp_dim": "intermediate_size",
}


def describes(config: T5Config) -> bool:
    """Whether `config` is a T5Gemma network (what save_hf_dir exports as 't5gemma')."""
    return config.rope_theta is not None


def _rope_theta(stack: dict) -> float:
    rope = stack.get("rope_parameters") or {}
    if rope.get("rope_type", "default") != "default":
        raise ConfigError(
            f"T5Gemma rope_type {rope['rope_type']!r} is not supported; t5forge runs the "
            "default RoPE only"
        )
    return float(rope.get("rope_theta", stack.get("rope_theta", 10000.0)))


def check_stack(name: str, stack: dict) -> None:
    activation = stack.get("hidden_activation", _ACTIVATION)
    if activation != _ACTIVATION:
        raise ConfigError(
            f"T5Gemma {name}.hidden_activation {activation!r} is not supported; t5forge runs "
            f"{_ACTIVATION!r}"
        )
    if stack.get("attention_bias"):
        raise ConfigError(
            f"T5Gemma {name}.attention_bias = true is not supported; t5forge's attention has "
            "no biases"
        )
    if stack.get("pad_token_id", _PAD_ID) != _PAD_ID:
        raise ConfigError(
            f"T5Gemma {name}.pad_token_id must be {_PAD_ID} (t5forge masks token 0), "
            f"got {stack['pad_token_id']}"
        )
    eos = stack.get("eos_token_id", _EOS_ID)
    if _EOS_ID not in (eos if isinstance(eos, list) else [eos]):
        raise ConfigError(
            f"T5Gemma {name}.eos_token_id {eos!r} does not include {_EOS_ID}, the end of "
            "sequence t5forge decodes to"
        )


def config_from_hf(hf_config: dict) -> T5Config:
    """The T5Config equal to a transformers T5GemmaConfig dict (config.json)."""
    encoder, decoder = hf_config.get("encoder"), hf_config.get("decoder")
    if not isinstance(encoder, dict) or not isinstance(decoder, dict):
        raise ConfigError(
            "T5Gemma config.json needs 'encoder' and 'decoder' sub-configs; this one lacks them"
        )
    for name, stack in (("encoder", encoder), ("decoder", decoder)):
        check_stack(name, stack)
    for key in _SHARED_BY_STACKS:
        if encoder.get(key) != decoder.get(key):
            raise ConfigError(
                f"T5Gemma encoder.{key} ({encoder.get(key)}) differs from decoder.{key} "
                f"({decoder.get(key)}); t5forge holds one value for both stacks"
            )
    if _rope_theta(encoder) != _rope_theta(decoder):
        raise ConfigError("T5Gemma encoder and decoder RoPE thetas differ; t5forge holds one")
    widths = {field: decoder[key] for field, key in _WIDTHS.items()}
    encoder_widths = {field: encoder[key] for field, key in _WIDTHS.items()}
    layer_types = {
        name: tuple(stack["layer_types"])
        for name, stack in (("encoder", encoder), ("decoder", decoder))
    }
    sliding = any(SLIDING_ATTENTION in kinds for kinds in layer_types.values())
    if widths["num_kv_heads"] == widths["num_heads"]:
        widths["num_kv_heads"] = None
    if encoder_widths["num_kv_heads"] == encoder_widths["num_heads"]:
        encoder_widths["num_kv_heads"] = None
    overrides = {k: v for k, v in encoder_widths.items() if v != widths[k]}
    return T5Config(
        vocab_size=decoder["vocab_size"],
        num_encoder_layers=encoder["num_hidden_layers"],
        num_decoder_layers=decoder["num_hidden_layers"],
        mlp_activations=_MLP_ACTIVATIONS,
        dropout_rate=float(hf_config.get("dropout_rate", 0.0)),
        logits_via_embedding=bool(hf_config.get("tie_word_embeddings", True)),
        scale_logits=False,
        dtype="float32",
        rope_theta=_rope_theta(decoder),
        query_pre_attn_scalar=decoder["query_pre_attn_scalar"],
        attn_logit_softcap=decoder.get("attn_logit_softcapping"),
        final_logit_softcap=decoder.get("final_logit_softcapping"),
        encoder_layer_types=layer_types["encoder"],
        decoder_layer_types=layer_types["decoder"],
        sliding_window=decoder.get("sliding_window") if sliding else None,
        zero_centered_norm=True,
        layer_norm_epsilon=decoder.get("rms_norm_eps", 1e-6),
        post_norms=True,
        separate_embeddings=True,
        scale_embeddings=True,
        decoder_start_token_id=decoder.get("bos_token_id", 2),
        encoder_overrides=overrides,
        **widths,
    )


def require_export_form(config: T5Config, needed: dict, family: str) -> None:
    """One line naming the first field of `config` that differs from what transformers'
    `family` always has (`needed`: field -> the one value it can express)."""
    for name, value in needed.items():
        if getattr(config, name) != value:
            raise ConfigError(
                f"{family} export needs {name} = {value!r}, this config has "
                f"{getattr(config, name)!r}; transformers' {family} has no other form"
            )


def _refuse_unexportable(config: T5Config) -> None:
    """One line for a config transformers' T5Gemma cannot express."""
    needed = {
        "zero_centered_norm": True,
        "post_norms": True,
        "separate_embeddings": True,
        "scale_embeddings": True,
        "mlp_activations": _MLP_ACTIVATIONS,
        "logits_scaled": False,
        "is_decoder_only": False,
        "scale_attn_logits": False,
        # T5Gemma 2's switches
        "qk_norm": False,
        "rope_local_theta": None,
        "rope_linear_factor": None,
        "encoder_window": "symmetric",
        "merged_attention": False,
        "eoi_token_id": None,
    }
    require_export_form(config, needed, "T5Gemma")
    scalar = config.query_pre_attn_scalar
    if scalar is None or float(scalar) != int(scalar):
        raise ConfigError(
            f"T5Gemma export needs an integer T5Config.query_pre_attn_scalar (transformers' "
            f"T5Gemma always scales the queries by one), got {scalar!r}; set it, e.g. to head_dim"
        )


def _stack_to_hf(config: T5Config, stack: str) -> dict:
    widths = config.encoder_config() if stack == "encoder" else config
    num_layers = config.num_encoder_layers if stack == "encoder" else config.num_decoder_layers
    return {
        "model_type": "t5_gemma_module",
        "vocab_size": config.vocab_size,
        "hidden_size": widths.emb_dim,
        "intermediate_size": widths.mlp_dim,
        "num_hidden_layers": num_layers,
        "num_attention_heads": widths.num_heads,
        "num_key_value_heads": widths.kv_heads,
        "head_dim": widths.head_dim,
        "hidden_activation": _ACTIVATION,
        "rms_norm_eps": config.layer_norm_epsilon,
        "rope_parameters": {"rope_type": "default", "rope_theta": config.rope_theta},
        "attention_bias": False,
        "query_pre_attn_scalar": int(config.query_pre_attn_scalar),
        "sliding_window": config.sliding_window,
        "layer_types": list(config.layer_types(stack)),
        "attn_logit_softcapping": config.attn_logit_softcap,
        "final_logit_softcapping": config.final_logit_softcap,
        "pad_token_id": _PAD_ID,
        "eos_token_id": _EOS_ID,
        "bos_token_id": config.decoder_start_token_id,
        "dropout_rate": config.dropout_rate,
    }


def config_to_hf(config: T5Config) -> dict:
    """The transformers `config.json` dict of a T5GemmaForConditionalGeneration equal to it."""
    _refuse_unexportable(config)
    return {
        "architectures": ["T5GemmaForConditionalGeneration"],
        "model_type": MODEL_TYPE,
        "encoder": _stack_to_hf(config, "encoder"),
        "decoder": _stack_to_hf(config, "decoder"),
        "is_encoder_decoder": True,
        "vocab_size": config.vocab_size,
        "dropout_rate": config.dropout_rate,
        "tie_word_embeddings": config.logits_via_embedding,
        "pad_token_id": _PAD_ID,
        "eos_token_id": _EOS_ID,
        "bos_token_id": config.decoder_start_token_id,
        "decoder_start_token_id": config.decoder_start_token_id,
        "use_cache": True,
        "dtype": "float32",
    }


def linear_entry(hf_name: str, path: tuple, fan_in: int, fan_out: int) -> tuple:
    return (f"{hf_name}.weight", path + ("kernel",), (fan_in, fan_out), True)


def attention_entries(hf_prefix: str, path: tuple, config: T5Config, kv_width: int):
    """q/k/v/o of one attention; keys and values project `kv_width` (the encoder's, across)."""
    inner, kv_inner = config.num_heads * config.head_dim, config.kv_heads * config.head_dim
    yield linear_entry(f"{hf_prefix}.q_proj", path + ("query",), config.emb_dim, inner)
    yield linear_entry(f"{hf_prefix}.k_proj", path + ("key",), kv_width, kv_inner)
    yield linear_entry(f"{hf_prefix}.v_proj", path + ("value",), kv_width, kv_inner)
    yield linear_entry(f"{hf_prefix}.o_proj", path + ("out",), inner, config.emb_dim)


def mlp_entries(hf_layer: str, layer: tuple, config: T5Config) -> Iterator[tuple]:
    """Gemma's gated MLP (gate, up, down) as T5X's wi_0, wi_1, wo."""
    mlp = layer + ("mlp",)
    yield linear_entry(f"{hf_layer}.mlp.gate_proj", mlp + ("wi_0",), config.emb_dim, config.mlp_dim)
    yield linear_entry(f"{hf_layer}.mlp.up_proj", mlp + ("wi_1",), config.emb_dim, config.mlp_dim)
    yield linear_entry(f"{hf_layer}.mlp.down_proj", mlp + ("wo",), config.mlp_dim, config.emb_dim)


def head_entries(config: T5Config) -> list[tuple]:
    """The output head of an untied model (none where the head is the decoder's embedding)."""
    if config.logits_via_embedding:
        return []
    return [
        linear_entry(
            "lm_head.out_proj", ("decoder", "logits_dense"), config.emb_dim, config.vocab_size
        )
    ]


def _stack_entries(stack: str, config: T5Config, encoder_width: int) -> Iterator[tuple]:
    """The tensors of one stack, `config` holding that stack's widths."""
    hf_stack = f"model.{stack}"
    yield (
        f"{hf_stack}.embed_tokens.weight",
        (stack, "token_embedder", "embedding"),
        (config.vocab_size, config.emb_dim),
        False,
    )
    # (HF attention, T5X attention, T5X norm stem); HF's norms are named after its attention.
    attentions = [("self_attn", "attention", "attention")]
    if stack == "decoder":
        attentions = [
            ("self_attn", "self_attention", "self_attention"),
            ("cross_attn", "encoder_decoder_attention", "cross_attention"),
        ]
    num_layers = config.num_encoder_layers if stack == "encoder" else config.num_decoder_layers
    for i in range(num_layers):
        hf_layer, layer = f"{hf_stack}.layers.{i}", (stack, f"layers_{i}")
        for hf_attention, attention, norm in attentions:
            for side in ("pre", "post"):
                yield (
                    f"{hf_layer}.{side}_{hf_attention}_layernorm.weight",
                    layer + (f"{side}_{norm}_layer_norm", "scale"),
                    (config.emb_dim,),
                    False,
                )
            kv_width = encoder_width if hf_attention == "cross_attn" else config.emb_dim
            yield from attention_entries(
                f"{hf_layer}.{hf_attention}", layer + (attention,), config, kv_width
            )
        for side in ("pre", "post"):
            yield (
                f"{hf_layer}.{side}_feedforward_layernorm.weight",
                layer + (f"{side}_mlp_layer_norm", "scale"),
                (config.emb_dim,),
                False,
            )
        yield from mlp_entries(hf_layer, layer, config)
    yield (f"{hf_stack}.norm.weight", (stack, f"{stack}_norm", "scale"), (config.emb_dim,), False)


def _tensor_map(config: T5Config) -> list[tuple[str, tuple, tuple, bool]]:
    """(HF name, T5X path, T5X shape, whether HF holds it transposed) for each tensor."""
    _refuse_unexportable(config)
    encoder = config.encoder_config()
    entries = list(_stack_entries("encoder", encoder, encoder.emb_dim))
    entries += _stack_entries("decoder", config, encoder.emb_dim)
    return entries + head_entries(config)


def _ignorable(config: T5Config) -> set[str]:
    # A tied head saved beside the decoder's embedding; transformers ties over it.
    return {"lm_head.out_proj.weight"} if config.logits_via_embedding else set()


def params_from_hf_state_dict(state_dict: dict, config: T5Config) -> dict:
    """T5X-named nested params (float32 numpy) from a transformers T5Gemma state dict."""
    return params_from_entries(state_dict, config, _tensor_map(config), _ignorable(config))


def params_to_hf_state_dict(params: dict, config: T5Config) -> dict:
    """A transformers T5Gemma state dict (float32 numpy, HF names) from t5forge params."""
    return state_dict_from_entries(params, config, _tensor_map(config))
