"""Hugging Face `transformers` T5Gemma 2 checkpoints (model_type 't5gemma2') <-> t5forge.

T5Gemma 2 is T5Gemma on Gemma 3: RMSNorms over head_dim on queries and keys (QK-norm), a RoPE
base per layer kind (local for sliding layers, global for full ones), an encoder window of W
keys split around the query, one embedding shared by both stacks and the head (with a learned
vector for the end-of-image token), and a decoder whose single attention reads its own
positions and the encoder's in one softmax through one set of projections (merged attention).
Its encoder wraps a text model beside a SigLIP vision tower: t5forge runs the text model, and
reads the encoder's tensors under both names transformers has used (`encoder.text_model.*`
and the older `encoder.*`).
"""

from __future__ import annotations

import logging

from t5forge.errors import ConfigError
from t5forge.interop.hf_t5gemma import (
    attention_entries,
    check_stack,
    head_entries,
    mlp_entries,
    require_export_form,
)
from t5forge.interop.hf_tensor_map import params_from_entries, state_dict_from_entries
from t5forge.models.configs import SLIDING_ATTENTION, T5Config

MODEL_TYPE = "t5gemma2"
_ENCODER, _TEXT = "model.encoder.", "model.encoder.text_model."
_VISION_PREFIXES = ("model.encoder.vision_tower.", "model.encoder.multi_modal_projector.")
_SHARED_BY_STACKS = ("vocab_size", "hidden_size", "query_pre_attn_scalar", "sliding_window")
_WIDTHS = {
    "emb_dim": "hidden_size",
    "num_heads": "num_attention_heads",
    "num_kv_heads": "num_key_value_heads",
    "head_dim": "head_dim",
    "mlp_dim": "intermediate_size",
}
_logger = logging.getLogger(__name__)


def _rope(stack: dict) -> tuple[float, float, float | None]:
    """(full layers' RoPE base, sliding layers' one, full layers' linear scaling factor or
    None) of a Gemma 3 sub-config; the published checkpoints scale full layers linearly."""
    rope = stack.get("rope_parameters") or {}
    full, local = rope.get("full_attention") or {}, rope.get("sliding_attention") or {}
    supported = (
        ("full_attention", full, ("default", "linear")),
        ("sliding_attention", local, ("default",)),
    )
    for name, kind, types in supported:
        if kind.get("rope_type", "default") not in types:
            raise ConfigError(
                f"T5Gemma 2 {name} rope_type {kind['rope_type']!r} is not supported; t5forge "
                f"runs {' or '.join(map(repr, types))} there"
            )
    factor = float(full["factor"]) if full.get("rope_type") == "linear" else None
    return (
        float(full.get("rope_theta", stack.get("rope_theta", 1_000_000.0))),
        float(local.get("rope_theta", stack.get("rope_local_base_freq", 10_000.0))),
        factor,
    )


def _widths(stack: dict) -> dict:
    widths = {field: stack[key] for field, key in _WIDTHS.items()}
    if widths["num_kv_heads"] == widths["num_heads"]:
        widths["num_kv_heads"] = None
    return widths


def config_from_hf(hf_config: dict) -> T5Config:
    """The T5Config of the text model of a transformers T5Gemma2Config dict (config.json)."""
    encoder, decoder = hf_config.get("encoder"), hf_config.get("decoder")
    text = encoder.get("text_config") if isinstance(encoder, dict) else None
    if not isinstance(text, dict) or not isinstance(decoder, dict):
        raise ConfigError(
            "T5Gemma 2 config.json needs 'encoder' (with its 'text_config') and 'decoder' "
            "sub-configs; this one lacks them"
        )
    for name, stack in (("encoder.text_config", text), ("decoder", decoder)):
        check_stack(name, stack)
    for key in _SHARED_BY_STACKS + ("rms_norm_eps",):
        if text.get(key) != decoder.get(key):
            raise ConfigError(
                f"T5Gemma 2 encoder.text_config.{key} ({text.get(key)}) differs from "
                f"decoder.{key} ({decoder.get(key)}); t5forge holds one value for both"
            )
    if _rope(text) != _rope(decoder):
        raise ConfigError(
            "T5Gemma 2 encoder and decoder RoPE parameters differ; t5forge holds one set"
        )
    full_theta, local_theta, linear_factor = _rope(decoder)
    layer_types = {"encoder": tuple(text["layer_types"]), "decoder": tuple(decoder["layer_types"])}
    sliding = any(SLIDING_ATTENTION in kinds for kinds in layer_types.values())
    widths, encoder_widths = _widths(decoder), _widths(text)
    eoi = hf_config.get("eoi_token_index", encoder.get("eoi_token_index"))
    # transformers ties the decoder's embedding and the head to the encoder's, or nothing.
    tied = bool(hf_config.get("tie_word_embeddings", True))
    return T5Config(
        vocab_size=decoder["vocab_size"],
        num_encoder_layers=text["num_hidden_layers"],
        num_decoder_layers=decoder["num_hidden_layers"],
        mlp_activations=("gelu", "linear"),
        dropout_rate=float(hf_config.get("dropout_rate", 0.0)),
        logits_via_embedding=tied,
        separate_embeddings=not tied,
        scale_logits=False,
        dtype="float32",
        rope_theta=full_theta,
        rope_local_theta=local_theta,
        rope_linear_factor=linear_factor,
        query_pre_attn_scalar=decoder["query_pre_attn_scalar"],
        # transformers' T5Gemma 2 attention passes no soft-cap, whatever the config says.
        final_logit_softcap=decoder.get("final_logit_softcapping"),
        encoder_layer_types=layer_types["encoder"],
        decoder_layer_types=layer_types["decoder"],
        sliding_window=decoder.get("sliding_window") if sliding else None,
        zero_centered_norm=True,
        layer_norm_epsilon=decoder.get("rms_norm_eps", 1e-6),
        post_norms=True,
        scale_embeddings=True,
        decoder_start_token_id=decoder.get("bos_token_id", 2),
        encoder_overrides={k: v for k, v in encoder_widths.items() if v != widths[k]},
        qk_norm=True,
        encoder_window="split",
        merged_attention=True,
        eoi_token_id=eoi,
        **widths,
    )


def _norm_entry(hf_name: str, path: tuple, width: int) -> tuple:
    return (f"{hf_name}.weight", path + ("scale",), (width,), False)


def _layer_entries(hf_layer: str, layer: tuple, attention: str, config: T5Config):
    """One Gemma 3 layer: its attention (with QK-norm) and MLP, each between two norms."""
    for side in ("pre", "post"):
        yield _norm_entry(
            f"{hf_layer}.{side}_self_attn_layernorm",
            layer + (f"{side}_{attention}_layer_norm",),
            config.emb_dim,
        )
        yield _norm_entry(
            f"{hf_layer}.{side}_feedforward_layernorm",
            layer + (f"{side}_mlp_layer_norm",),
            config.emb_dim,
        )
    path = layer + (attention,)
    yield from attention_entries(f"{hf_layer}.self_attn", path, config, config.emb_dim)
    yield _norm_entry(f"{hf_layer}.self_attn.q_norm", path + ("query_norm",), config.head_dim)
    yield _norm_entry(f"{hf_layer}.self_attn.k_norm", path + ("key_norm",), config.head_dim)
    yield from mlp_entries(hf_layer, layer, config)


def _tensor_map(config: T5Config) -> list[tuple[str, tuple, tuple, bool]]:
    """(HF name, T5X path, T5X shape, whether HF holds it transposed) for each tensor."""
    encoder = config.encoder_config()
    entries: list = []
    embedders = {_TEXT: ("token_embedder",)}
    if config.separate_embeddings:
        embedders = {
            _TEXT: ("encoder", "token_embedder"),
            "model.decoder.": ("decoder", "token_embedder"),
        }
    for hf_prefix, path in embedders.items():
        entries += [
            (
                f"{hf_prefix}embed_tokens.weight",
                path + ("embedding",),
                (config.vocab_size, config.emb_dim),
                False,
            ),
            (
                f"{hf_prefix}embed_tokens.eoi_embedding",
                path + ("eoi_embedding",),
                (config.emb_dim,),
                False,
            ),
        ]
    entries += [
        _norm_entry(f"{_TEXT}norm", ("encoder", "encoder_norm"), config.emb_dim),
        _norm_entry("model.decoder.norm", ("decoder", "decoder_norm"), config.emb_dim),
    ]
    for i in range(config.num_encoder_layers):
        entries += _layer_entries(
            f"{_TEXT}layers.{i}", ("encoder", f"layers_{i}"), "attention", encoder
        )
    for i in range(config.num_decoder_layers):
        entries += _layer_entries(
            f"model.decoder.layers.{i}",
            ("decoder", f"layers_{i}"),
            "self_attention",
            config,
        )
    return entries + head_entries(config)


def _ignorable(config: T5Config) -> set[str]:
    """Tensors transformers ties to the encoder's embedding (saved or not)."""
    if config.separate_embeddings:
        return set()
    return {
        "model.decoder.embed_tokens.weight",
        "model.decoder.embed_tokens.eoi_embedding",
        "lm_head.out_proj.weight",
    }


def _text_model(state_dict: dict) -> dict:
    """The text model's tensors under today's names; the vision tower's set aside, said once."""
    renamed, vision = {}, 0
    for name, value in state_dict.items():
        if name.startswith(_VISION_PREFIXES):
            vision += 1
            continue
        if name.startswith(_ENCODER) and not name.startswith(_TEXT):
            name = _TEXT + name[len(_ENCODER) :]  # the older spelling, encoder.layers.* ...
        renamed[name] = value
    if vision:
        _logger.warning(
            "T5Gemma 2: loaded the text model; the %d tensors of its vision tower and "
            "projector are not read (t5forge runs text only)",
            vision,
        )
    return renamed


def params_from_hf_state_dict(state_dict: dict, config: T5Config) -> dict:
    """T5X-named nested params (float32 numpy) from a transformers T5Gemma 2 state dict."""
    return params_from_entries(
        _text_model(state_dict), config, _tensor_map(config), _ignorable(config)
    )


def params_to_hf_state_dict(params: dict, config: T5Config) -> dict:
    """A transformers T5Gemma 2 state dict (the text model, HF names) from t5forge params."""
    return state_dict_from_entries(params, config, _tensor_map(config))


def describes(config: T5Config) -> bool:
    """Whether `config` is a T5Gemma 2 network (what save_hf_dir exports as 't5gemma2')."""
    return config.merged_attention


def _refuse_unexportable(config: T5Config) -> None:
    """One line for a config transformers' T5Gemma 2 cannot express."""
    needed = {
        "qk_norm": True,
        "zero_centered_norm": True,
        "post_norms": True,
        "separate_embeddings": not config.logits_via_embedding,
        "scale_embeddings": True,
        "encoder_window": "split",
        "mlp_activations": ("gelu", "linear"),
        "logits_scaled": False,
        "scale_attn_logits": False,
        "attn_logit_softcap": None,
    }
    require_export_form(config, needed, "T5Gemma 2")
    scalar = config.query_pre_attn_scalar
    if scalar is None or float(scalar) != int(scalar) or config.eoi_token_id is None:
        raise ConfigError(
            "T5Gemma 2 export needs an integer T5Config.query_pre_attn_scalar and an "
            f"eoi_token_id (transformers' T5Gemma 2 always has both), got {scalar!r} and "
            f"{config.eoi_token_id!r}"
        )


def _full_rope_to_hf(config: T5Config) -> dict:
    if config.rope_linear_factor is None:
        return {"rope_type": "default", "rope_theta": config.rope_theta}
    return {
        "rope_type": "linear",
        "factor": config.rope_linear_factor,
        "rope_theta": config.rope_theta,
    }


def _stack_to_hf(config: T5Config, stack: str) -> dict:
    widths = config.encoder_config() if stack == "encoder" else config
    local = config.rope_theta if config.rope_local_theta is None else config.rope_local_theta
    return {
        "model_type": "t5gemma2_text" if stack == "encoder" else "t5gemma2_decoder",
        "vocab_size": config.vocab_size,
        "hidden_size": widths.emb_dim,
        "intermediate_size": widths.mlp_dim,
        "num_hidden_layers": len(config.layer_types(stack)),
        "num_attention_heads": widths.num_heads,
        "num_key_value_heads": widths.kv_heads,
        "head_dim": widths.head_dim,
        "hidden_activation": "gelu_pytorch_tanh",
        "rms_norm_eps": config.layer_norm_epsilon,
        "rope_parameters": {
            "full_attention": _full_rope_to_hf(config),
            "sliding_attention": {"rope_type": "default", "rope_theta": local},
        },
        "attention_bias": False,
        "query_pre_attn_scalar": int(config.query_pre_attn_scalar),
        "sliding_window": config.sliding_window,
        "layer_types": list(config.layer_types(stack)),
        "final_logit_softcapping": config.final_logit_softcap,
        "pad_token_id": 0,
        "eos_token_id": 1,
        "bos_token_id": config.decoder_start_token_id,
        "dropout_rate": config.dropout_rate,
    }


def config_to_hf(config: T5Config) -> dict:
    """The transformers `config.json` dict of a T5Gemma2ForConditionalGeneration whose text
    model equals `config`; transformers gives it its default vision tower, untrained."""
    _refuse_unexportable(config)
    return {
        "architectures": ["T5Gemma2ForConditionalGeneration"],
        "model_type": MODEL_TYPE,
        "encoder": {
            "model_type": "t5gemma2_encoder",
            "text_config": _stack_to_hf(config, "encoder"),
            "eoi_token_index": config.eoi_token_id,
        },
        "decoder": _stack_to_hf(config, "decoder"),
        "is_encoder_decoder": True,
        "eoi_token_index": config.eoi_token_id,
        "vocab_size": config.vocab_size,
        "dropout_rate": config.dropout_rate,
        "tie_word_embeddings": config.logits_via_embedding,
        "pad_token_id": 0,
        "eos_token_id": 1,
        "bos_token_id": config.decoder_start_token_id,
        "decoder_start_token_id": config.decoder_start_token_id,
        "use_cache": True,
        "dtype": "float32",
    }
