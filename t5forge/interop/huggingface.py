"""Hugging Face `transformers` T5 (and mT5, LongT5) checkpoints <-> t5forge parameters, both
ways, exactly.

HF T5 and T5X hold the same tensors under other names: HF linear weights are [out, in] where
T5X kernels are [in, out], the relative position bias sits in block 0 of each stack, and the
language-model head is either tied to the token embedding (T5 1.0) or a separate `lm_head`
(T5 1.1, mT5, ByT5); the logits are scaled by 1/sqrt(d_model) as `scale_decoder_outputs` says
(transformers 5 sets it apart from the tie). Everything here is numpy on flat
state dicts and nested param dicts, so a conversion needs neither torch nor a model build; torch
is imported only to read legacy `pytorch_model.bin` files. LongT5 (model_type 'longt5') is T5 with
another encoder self-attention module (`LocalSelfAttention` or `TransientGlobalSelfAttention`,
T5Config.encoder_attention); transient-global's side relative bias sits in block 0 like the
other, its global-token norm in every block (T5X: `attention/T5LayerNorm_0`).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np

from t5forge import storage
from t5forge.errors import CheckpointError, ConfigError
from t5forge.interop.hf_t5_map import ENCODER_ATTENTIONS, tensor_map
from t5forge.interop.hf_tensor_map import params_from_entries, state_dict_from_entries
from t5forge.models.configs import T5Config

# HF `feed_forward_proj` <-> T5X `mlp_activations`. HF's plain "gelu" is the exact erf GELU while
# T5X's is the tanh approximation, which HF calls "gelu_new" (and uses for "gated-gelu").
_ACTIVATIONS_FROM_HF = {
    "relu": ("relu",),
    "gelu_new": ("gelu",),
    "silu": ("silu",),
    "gated-gelu": ("gelu", "linear"),
    "gated-gelu_new": ("gelu", "linear"),
    "gated-relu": ("relu", "linear"),
    "gated-silu": ("silu", "linear"),
}
_ACTIVATIONS_TO_HF = {
    ("relu",): "relu",
    ("gelu",): "gelu_new",
    ("silu",): "silu",
    ("swish",): "silu",
    ("gelu", "linear"): "gated-gelu",
    ("relu", "linear"): "gated-relu",
    ("silu", "linear"): "gated-silu",
    ("swish", "linear"): "gated-silu",
}
_SUPPORTED_MODEL_TYPES = ("t5", "mt5", "longt5")
_LONGT5_DEFAULTS = {"encoder_attention_type": "local", "local_radius": 127, "global_block_size": 16}
# Aliases HF checkpoints may carry beside `shared.weight`; they hold no information of their own.
_EMBEDDING_ALIASES = ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight")
# Old HF checkpoints carry a cross-attention bias HF itself never uses.
_UNUSED_HF_TENSORS = ("decoder.block.0.layer.1.EncDecAttention.relative_attention_bias.weight",)
_LAYER_NORM_EPSILON = 1e-6


def config_from_hf(hf_config: dict, state_dict: dict | None = None) -> T5Config:
    """The T5Config equivalent to a transformers `config.json` dict (T5, mT5, ByT5 layouts).

    Whether the head is tied is the checkpoint's to say where `state_dict` is given, since
    transformers 5 ties it exactly when no separate lm_head.weight is saved.
    """
    model_type = hf_config.get("model_type", "t5")
    if model_type not in _SUPPORTED_MODEL_TYPES:
        raise ConfigError(
            f"Hugging Face model_type {model_type!r} is not supported; "
            f"t5forge converts {_SUPPORTED_MODEL_TYPES}"
        )
    if not hf_config.get("is_encoder_decoder", True):
        raise ConfigError(
            "the Hugging Face config is not an encoder-decoder T5 "
            "(is_encoder_decoder=false); only T5ForConditionalGeneration converts"
        )
    t5_like = model_type != "mt5"  # LongT5's defaults are T5's
    projection = hf_config.get("feed_forward_proj", "relu" if t5_like else "gated-gelu")
    if projection not in _ACTIVATIONS_FROM_HF:
        raise ConfigError(
            f"Hugging Face feed_forward_proj {projection!r} has no t5forge "
            f"equivalent; supported: {sorted(_ACTIVATIONS_FROM_HF)}"
        )
    epsilon = hf_config.get("layer_norm_epsilon", _LAYER_NORM_EPSILON)
    if not np.isclose(epsilon, _LAYER_NORM_EPSILON):
        raise ConfigError(
            f"Hugging Face layer_norm_epsilon {epsilon} differs from T5's "
            f"{_LAYER_NORM_EPSILON}, which t5forge's RMSNorm uses"
        )
    # transformers 5 forces tie_word_embeddings to true and ties the head unless the checkpoint
    # holds an lm_head.weight of its own; without the tensors, the field is read as
    # transformers < 5 did (mT5's default: a separate head).
    if state_dict is None:
        tied = hf_config.get("tie_word_embeddings", t5_like) is not False
    else:
        tied = not _has_separate_head(state_dict)
    # T5 divides the decoder output by sqrt(d_model) when `scale_decoder_outputs` (transformers
    # 5), which a config without it takes from tie_word_embeddings (as < 5 did); mT5 never does.
    scaled = t5_like and bool(
        hf_config.get("scale_decoder_outputs", hf_config.get("tie_word_embeddings") is not False)
    )
    num_layers = hf_config.get("num_layers", 6)
    decoder_layers = hf_config.get("num_decoder_layers")
    return T5Config(
        vocab_size=hf_config.get("vocab_size", 32128),
        emb_dim=hf_config.get("d_model", 512),
        num_heads=hf_config.get("num_heads", 8),
        num_encoder_layers=num_layers,
        num_decoder_layers=num_layers if decoder_layers is None else decoder_layers,
        head_dim=hf_config.get("d_kv", 64),
        mlp_dim=hf_config.get("d_ff", 2048),
        mlp_activations=_ACTIVATIONS_FROM_HF[projection],
        dropout_rate=float(hf_config.get("dropout_rate", 0.1)),
        logits_via_embedding=tied,
        scale_logits=scaled,
        dtype="float32",
        relative_attention_num_buckets=hf_config.get("relative_attention_num_buckets", 32),
        relative_attention_max_distance=hf_config.get("relative_attention_max_distance", 128),
        **(_long_encoder_fields(hf_config) if model_type == "longt5" else {}),
    )


def _long_encoder_fields(hf_config: dict) -> dict:
    """The T5Config fields of a LongT5 config.json's encoder attention."""
    hf_config = {**_LONGT5_DEFAULTS, **hf_config}
    kinds = {hf_name: kind for kind, (hf_name, _) in ENCODER_ATTENTIONS.items() if hf_name}
    kind = hf_config["encoder_attention_type"]
    if kind not in kinds:
        raise ConfigError(
            f"Hugging Face LongT5 encoder_attention_type {kind!r} is not supported; "
            f"choose from {sorted(kinds)}"
        )
    return dict(
        encoder_attention=kinds[kind],
        local_radius=hf_config["local_radius"],
        global_block_size=hf_config["global_block_size"],
    )


def _refuse_scaled_attention(config: T5Config) -> None:
    """HF T5 never scales attention logits: such a network is not an HF T5, either way."""
    if config.scale_attn_logits:
        raise ConfigError(
            "scale_attn_logits = True has no Hugging Face T5 equivalent (HF T5 never scales "
            "attention logits); use a config without it"
        )


def config_to_hf(config: T5Config) -> dict:
    """The transformers `config.json` dict of a T5ForConditionalGeneration equal to `config`."""
    if config.num_experts:
        raise ConfigError(
            "Hugging Face T5 has no mixture of experts; a sparse config exports as "
            "model_type 'switch_transformers' (hf_switch.config_to_hf)"
        )
    switches = config.family_switches()
    if switches:
        raise ConfigError(
            f"Hugging Face T5 has no {switches[0]} (set in this config); "
            "only a T5 without the Gemma switches exports as model_type 't5'"
        )
    if config.is_decoder_only:
        raise ConfigError(
            "Hugging Face T5 has no decoder-only model; only encoder_decoder "
            "configs export to transformers"
        )
    _refuse_scaled_attention(config)
    activations = tuple(config.mlp_activations)
    if activations not in _ACTIVATIONS_TO_HF:
        raise ConfigError(
            f"mlp_activations {activations} have no Hugging Face T5 equivalent; "
            f"exportable: {sorted(_ACTIVATIONS_TO_HF)}"
        )
    return {
        "architectures": ["T5ForConditionalGeneration"],
        "model_type": "t5",
        "vocab_size": config.vocab_size,
        "d_model": config.emb_dim,
        "d_kv": config.head_dim,
        "d_ff": config.mlp_dim,
        "num_layers": config.num_encoder_layers,
        "num_decoder_layers": config.num_decoder_layers,
        "num_heads": config.num_heads,
        "relative_attention_num_buckets": config.relative_attention_num_buckets,
        "relative_attention_max_distance": config.relative_attention_max_distance,
        "dropout_rate": config.dropout_rate,
        "layer_norm_epsilon": _LAYER_NORM_EPSILON,
        "initializer_factor": 1.0,
        "feed_forward_proj": _ACTIVATIONS_TO_HF[activations],
        "is_encoder_decoder": True,
        # transformers < 5 reads tie_word_embeddings as both the tie and the scale, so it reads
        # T5 1.0 and 1.1 configs right but no other mix. transformers 5 ties the head exactly
        # when no lm_head.weight is saved (logging "will NOT tie them" for a separate one, as
        # for Google's own T5 1.1 checkpoints) and scales by scale_decoder_outputs.
        "tie_word_embeddings": config.logits_via_embedding,
        "scale_decoder_outputs": config.logits_scaled,
        "pad_token_id": 0,
        "eos_token_id": 1,
        "decoder_start_token_id": 0,
        "use_cache": True,
        "dtype": "float32",
        **_long_encoder_hf_fields(config),
    }


def _long_encoder_hf_fields(config: T5Config) -> dict:
    """What makes a T5 config.json a LongT5 one (nothing for T5's full attention)."""
    if not config.is_long_encoder:
        return {}
    return {
        "architectures": ["LongT5ForConditionalGeneration"],
        "model_type": "longt5",
        "encoder_attention_type": ENCODER_ATTENTIONS[config.encoder_attention][0],
        "local_radius": config.local_radius,
        "global_block_size": config.global_block_size,
    }


def _ignorable_hf_names(config: T5Config) -> set[str]:
    ignorable = set(_EMBEDDING_ALIASES) | set(_UNUSED_HF_TENSORS)
    if config.logits_via_embedding:
        ignorable.add("lm_head.weight")  # a tied head saved beside `shared.weight`
    return ignorable


def _has_separate_head(state_dict: dict) -> bool:
    # .bin files and transformers < 5 save a tied head as a copy beside `shared.weight`.
    head = state_dict.get("lm_head.weight")
    return head is not None and not np.array_equal(head, state_dict.get("shared.weight"))


def params_from_hf_state_dict(state_dict: dict, config: T5Config) -> dict:
    """T5X-named nested params (float32 numpy) from a transformers T5 state dict.

    The params come in the layout `config` runs with: per layer, or stacked when scan_layers.
    """
    if config.logits_via_embedding and _has_separate_head(state_dict):
        raise CheckpointError(
            "Hugging Face checkpoint has an lm_head.weight that differs from "
            "shared.weight but the config ties them; pass a config with "
            "logits_via_embedding=False"
        )
    return params_from_entries(state_dict, config, tensor_map(config), _ignorable_hf_names(config))


def params_to_hf_state_dict(params: dict, config: T5Config) -> dict[str, np.ndarray]:
    """A transformers T5 state dict (float32 numpy, HF names) from T5X-named params.

    Scanned params (a `layers` subtree per stack) are split into their layers first.
    """
    return state_dict_from_entries(params, config, tensor_map(config))


def _read_safetensors(path: Path) -> dict[str, np.ndarray]:
    from safetensors import SafetensorError, safe_open

    # The flax reader understands bfloat16, which numpy alone does not.
    try:
        with safe_open(str(path), framework="flax") as reader:
            return {
                name: np.asarray(reader.get_tensor(name), dtype=np.float32)
                for name in reader.keys()
            }
    except SafetensorError as error:  # a truncated or overwritten file
        raise CheckpointError(
            f"{path} is not a readable safetensors file ({error}); it is truncated or damaged: "
            "download or export it again"
        ) from None


def _read_pytorch_bin(path: Path) -> dict[str, np.ndarray]:
    try:
        import torch
    except ImportError as error:
        raise CheckpointError(
            f"{path} is a PyTorch pickle and reading it needs torch; install "
            f"the extra `t5forge[torch]` or save the model as safetensors"
        ) from error
    try:
        state_dict = torch.load(str(path), map_location="cpu", weights_only=True)
    except (RuntimeError, EOFError, ValueError) as error:  # truncated zip, damaged pickle
        first = (str(error).strip().splitlines() or [type(error).__name__])[0][:200]
        raise CheckpointError(
            f"{path} is not a readable PyTorch checkpoint ({first}); it is truncated or "
            "damaged: download or export it again"
        ) from None
    return {name: tensor.float().numpy() for name, tensor in state_dict.items()}


def _read_state_dict(path: Path) -> dict[str, np.ndarray]:
    single = path / "model.safetensors"
    index = path / "model.safetensors.index.json"
    if single.is_file():
        return _read_safetensors(single)
    if index.is_file():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        state_dict = {}
        for shard in shards:
            if not (path / shard).is_file():
                raise CheckpointError(f"shard {shard} named in {index} is missing")
            state_dict.update(_read_safetensors(path / shard))
        return state_dict
    if (path / "pytorch_model.bin").is_file():
        return _read_pytorch_bin(path / "pytorch_model.bin")
    raise CheckpointError(
        f"{path} has no model.safetensors, model.safetensors.index.json or "
        f"pytorch_model.bin; it is not a Hugging Face model directory"
    )


def is_hf_dir(path) -> bool:
    """True when `path` looks like a transformers model directory (config.json or weights)."""
    path = Path(path)
    names = (
        "config.json",
        "model.safetensors",
        "model.safetensors.index.json",
        "pytorch_model.bin",
    )
    return any((path / name).is_file() for name in names)


def load_hf_dir(path, config: T5Config | None = None) -> tuple[T5Config, dict]:
    """(config, params) from a transformers T5 directory (config.json + safetensors or .bin).

    A given `config` replaces the one converted from config.json (e.g. to run in bfloat16 or
    with scanned layers); the tensors must still fit it.
    """
    path = Path(path)
    if config is not None:
        _refuse_scaled_attention(config)
    config_file = path / "config.json"
    if not config_file.is_file():
        raise CheckpointError(
            f"{config_file} not found; a Hugging Face model directory needs its config.json"
        )
    try:
        hf_config = json.loads(config_file.read_text())
    except json.JSONDecodeError as error:
        raise CheckpointError(f"{config_file} is not valid JSON: {error}") from error
    state_dict = _read_state_dict(path)
    if hf_config.get("model_type") == "switch_transformers":
        from t5forge.interop import hf_switch

        config = config or hf_switch.config_from_hf(hf_config)
        return config, hf_switch.params_from_hf_state_dict(state_dict, config)
    if hf_config.get("model_type") in ("t5gemma", "t5gemma2"):
        from t5forge.interop import hf_t5gemma, hf_t5gemma2

        family = hf_t5gemma if hf_config["model_type"] == "t5gemma" else hf_t5gemma2
        config = config or family.config_from_hf(hf_config)
        return config, family.params_from_hf_state_dict(state_dict, config)
    config = config or config_from_hf(hf_config, state_dict)
    return config, params_from_hf_state_dict(state_dict, config)


def save_hf_dir(params: dict, config: T5Config, path, vocab_path=None, extra_ids: int = 0) -> Path:
    """Writes config.json + model.safetensors (+ spiece.model) that transformers loads offline.

    With `vocab_path` the SentencePiece model is copied as spiece.model and
    tokenizer_config.json records its `extra_ids` (transformers would otherwise assume 100).
    A T5Gemma (2) config (hf_t5gemma.describes, hf_t5gemma2.describes) is written as model_type
    't5gemma' ('t5gemma2'), its vocabulary as Gemma's tokenizer.model; a mixture of experts
    (hf_switch.describes) as 'switch_transformers'.
    """
    from safetensors.numpy import save_file

    from t5forge.interop import hf_switch, hf_t5gemma, hf_t5gemma2

    path = Path(path)
    family = sys.modules[__name__]
    if hf_switch.describes(config):
        family = hf_switch
    elif hf_t5gemma2.describes(config):
        family = hf_t5gemma2
    elif hf_t5gemma.describes(config):
        family = hf_t5gemma
    hf_config = family.config_to_hf(config)  # refusals before anything is written
    state_dict = family.params_to_hf_state_dict(params, config)
    path.mkdir(parents=True, exist_ok=True)
    # Each file whole or not at all: a full disk never leaves a truncated model.safetensors.
    with storage.replaced_atomically(path / "model.safetensors") as temporary:
        save_file(state_dict, str(temporary), metadata={"format": "pt"})
    if vocab_path is not None:
        gemma = family in (hf_t5gemma, hf_t5gemma2)
        vocab_name = hf_t5gemma.TOKENIZER_FILE if gemma else "spiece.model"
        with storage.replaced_atomically(path / vocab_name) as temporary:
            shutil.copyfile(vocab_path, temporary)
        tokenizer_config = {"tokenizer_class": "T5Tokenizer", "extra_ids": extra_ids}
        if gemma:
            tokenizer_config = {"tokenizer_class": "GemmaTokenizer"}
        storage.write_atomically(
            path / "tokenizer_config.json", json.dumps(tokenizer_config, indent=2) + "\n"
        )
    # config.json last: a directory without it is not taken for a model.
    storage.write_atomically(path / "config.json", json.dumps(hf_config, indent=2) + "\n")
    return path
