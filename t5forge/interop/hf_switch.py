"""Hugging Face `transformers` Switch Transformers (model_type 'switch_transformers') <-> t5forge.

A Switch Transformer is T5 1.0's network (plain MLPs, relative position buckets, a head tied to
the embedding and scaled by 1/sqrt(d_model) unless untied) whose sparse layers put a top-1
router and `num_experts` MLPs where the MLP was. transformers routes each sequence as one group
with a fixed `expert_capacity` (t5forge's routing_groups='sequence') and makes layer i of a
stack sparse when i % step == 1 (or step == 1), step = num_layers // num_sparse_layers
(sparse layout 'huggingface'). The tensors are T5's, with the MLP under `mlp` instead of
`DenseReluDense`, the router's classifier [experts, emb] and each expert's wi/wo apart; t5forge
keeps the experts stacked on a leading axis (`mlp/expert/wi/kernel` [experts, emb, mlp]).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from t5forge.errors import ConfigError
from t5forge.interop.hf_t5_map import mlp_entries, tensor_map
from t5forge.interop.hf_tensor_map import params_from_entries, state_dict_from_entries
from t5forge.models.configs import SEQUENCE_GROUPS, TOKENS_CHOOSE, T5Config
from t5forge.models.param_layout import stack_layers, unstack_layers
from t5forge.models.sparse_layout import huggingface_sparse_count

MODEL_TYPE = "switch_transformers"
# transformers' dense_act_fn (ACT2FN names) <-> T5X's one activation; HF's 'gelu' is the erf
# GELU, T5X's the tanh one ('gelu_new').
_ACTIVATIONS_FROM_HF = {"relu": "relu", "gelu_new": "gelu", "silu": "silu", "swish": "silu"}
_ACTIVATIONS_TO_HF = {"relu": "relu", "gelu": "gelu_new", "silu": "silu", "swish": "silu"}
_EMBEDDING_ALIASES = ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight")


def describes(config: T5Config) -> bool:
    """Whether `config` is a mixture of experts (what save_hf_dir exports as Switch)."""
    return config.num_experts > 0


def _hf_flags(num_layers: int, num_sparse: int) -> tuple[bool, ...]:
    """The sparse layers transformers builds (SwitchTransformersConfig.__post_init__ and
    SwitchTransformersStack): with 0 sparse layers its step is num_layers, which still makes
    layer 1 sparse (or layer 0 of a one-layer stack)."""
    step = num_layers // num_sparse if num_sparse > 0 else num_layers
    return tuple(step == 1 or i % step == 1 for i in range(num_layers))


def config_from_hf(hf_config: dict) -> T5Config:
    """The T5Config equal to a transformers SwitchTransformersConfig dict (config.json)."""
    activation = hf_config.get("dense_act_fn", "relu")
    if activation not in _ACTIVATIONS_FROM_HF:
        raise ConfigError(
            f"Switch Transformers dense_act_fn {activation!r} has no t5forge equivalent; "
            f"supported: {sorted(_ACTIVATIONS_FROM_HF)}"
        )
    if hf_config.get("router_bias"):
        raise ConfigError(
            "Switch Transformers router_bias = true is not supported; t5forge's router (as "
            "T5X's Switch models) has no bias"
        )
    router_dtype = hf_config.get("router_dtype", "float32")
    if router_dtype != "float32":
        raise ConfigError(
            f"Switch Transformers router_dtype {router_dtype!r} is not supported; t5forge "
            "routes in float32"
        )
    if not hf_config.get("is_encoder_decoder", True):
        raise ConfigError("Switch Transformers with is_encoder_decoder = false do not convert")
    num_layers = hf_config.get("num_layers", 12)
    decoder_layers = hf_config.get("num_decoder_layers") or num_layers
    sparse_counts = {}
    for stack, layers in (("encoder", num_layers), ("decoder", decoder_layers)):
        flags = _hf_flags(layers, hf_config.get(f"num_sparse_{stack}_layers", 3))
        sparse_counts[f"num_sparse_{stack}_layers"] = huggingface_sparse_count(flags)
    tied = hf_config.get("tie_word_embeddings", True) is not False
    mlp_dim = hf_config.get("d_ff", 2048)
    return T5Config(
        vocab_size=hf_config.get("vocab_size", 32128),
        emb_dim=hf_config.get("d_model", 768),
        num_heads=hf_config.get("num_heads", 12),
        num_encoder_layers=num_layers,
        num_decoder_layers=decoder_layers,
        head_dim=hf_config.get("d_kv", 64),
        mlp_dim=mlp_dim,
        mlp_activations=(_ACTIVATIONS_FROM_HF[activation],),
        dropout_rate=float(hf_config.get("dropout_rate", 0.1)),
        logits_via_embedding=tied,
        dtype="float32",
        relative_attention_num_buckets=hf_config.get("relative_attention_num_buckets", 32),
        relative_attention_max_distance=hf_config.get("relative_attention_max_distance", 128),
        layer_norm_epsilon=float(hf_config.get("layer_norm_epsilon", 1e-6)),
        num_experts=hf_config.get("num_experts", 8),
        expert_mlp_dim=mlp_dim,
        encoder_sparse_layout="huggingface",
        decoder_sparse_layout="huggingface",
        routing_groups=SEQUENCE_GROUPS,
        expert_capacity=hf_config.get("expert_capacity", 64),
        router_jitter_noise=float(hf_config.get("router_jitter_noise", 0.01)),
        router_z_loss_factor=float(hf_config.get("router_z_loss_coef", 0.001)),
        aux_loss_factor=float(hf_config.get("router_aux_loss_coef", 0.001)),
        **sparse_counts,
    )


def _hf_sparse_count(config: T5Config, stack: str) -> int:
    """The num_sparse_<stack>_layers whose transformers layout is this config's, or a refusal."""
    flags = config.sparse_layers(stack)
    count = huggingface_sparse_count(flags)
    if count is None or _hf_flags(len(flags), count) != flags:
        layers = [i for i, sparse in enumerate(flags) if sparse]
        raise ConfigError(
            f"Switch Transformers cannot place sparse {stack} layers at {layers}: transformers "
            "makes layer i sparse when i % (num_layers // num_sparse) == 1; use "
            f"{stack}_sparse_layout='huggingface'"
        )
    return count


def _refuse_unexportable(config: T5Config) -> None:
    """One line for each way a t5forge MoE differs from what transformers can compute."""
    problems = [
        (config.is_decoder_only, "a decoder-only model"),
        (len(config.mlp_activations) != 1, f"gated MLPs ({config.mlp_activations})"),
        (config.routing_groups != SEQUENCE_GROUPS, "routing_groups='batch' (T5X's groups)"),
        (config.num_selected_experts != 1, f"top-{config.num_selected_experts} routing"),
        (
            TOKENS_CHOOSE != config.encoder_router or TOKENS_CHOOSE != config.decoder_router,
            "experts-choose routing",
        ),
        (
            config.encoder_batch_prioritized_routing or config.decoder_batch_prioritized_routing,
            "batch-prioritised routing",
        ),
        (config.sparse_extra_mlp, "ST-MoE's extra MLP"),
        ((config.expert_mlp_dim or config.mlp_dim) != config.mlp_dim, "experts wider than mlp_dim"),
        (config.family_switches(), f"the T5Gemma switches {config.family_switches()}"),
        (config.scale_attn_logits, "scaled attention logits"),
        (config.logits_scaled != config.logits_via_embedding, "a head scale apart from the tie"),
    ]
    for refused, what in problems:
        if refused:
            raise ConfigError(
                f"Hugging Face Switch Transformers cannot hold {what}; convert this mixture "
                "of experts --to t5forge or --to t5x instead"
            )
    if config.mlp_activations[0] not in _ACTIVATIONS_TO_HF:
        raise ConfigError(
            f"mlp_activations {config.mlp_activations} have no Switch Transformers "
            f"dense_act_fn; exportable: {sorted(_ACTIVATIONS_TO_HF)}"
        )


def config_to_hf(config: T5Config) -> dict:
    """The transformers `config.json` dict of a SwitchTransformersForConditionalGeneration."""
    _refuse_unexportable(config)
    return {
        "architectures": ["SwitchTransformersForConditionalGeneration"],
        "model_type": MODEL_TYPE,
        "vocab_size": config.vocab_size,
        "d_model": config.emb_dim,
        "d_kv": config.head_dim,
        "d_ff": config.mlp_dim,
        "num_layers": config.num_encoder_layers,
        "num_decoder_layers": config.num_decoder_layers,
        "num_sparse_encoder_layers": _hf_sparse_count(config, "encoder"),
        "num_sparse_decoder_layers": _hf_sparse_count(config, "decoder"),
        "num_heads": config.num_heads,
        "num_experts": config.num_experts,
        "expert_capacity": config.expert_capacity,
        "router_bias": False,
        "router_jitter_noise": config.router_jitter_noise,
        "router_dtype": "float32",
        "router_ignore_padding_tokens": False,
        "router_z_loss_coef": config.router_z_loss_factor,
        "router_aux_loss_coef": config.aux_loss_factor,
        "relative_attention_num_buckets": config.relative_attention_num_buckets,
        "relative_attention_max_distance": config.relative_attention_max_distance,
        "dropout_rate": config.dropout_rate,
        "layer_norm_epsilon": config.layer_norm_epsilon,
        "initializer_factor": 1.0,
        "dense_act_fn": _ACTIVATIONS_TO_HF[config.mlp_activations[0]],
        "is_encoder_decoder": True,
        "tie_word_embeddings": config.logits_via_embedding,
        "pad_token_id": 0,
        "eos_token_id": 1,
        "decoder_start_token_id": 0,
        "use_cache": True,
        "dtype": "float32",
    }


def _sparse_entries(hf_prefix: str, layer: tuple, config: T5Config):
    """The router's entry and each expert's, whose T5X path ends in the expert's index (the
    experts are stacked after the walk, `_stack_experts`)."""
    emb, width = config.emb_dim, config.expert_mlp_dim or config.mlp_dim
    mlp = layer + ("mlp",)
    yield (
        f"{hf_prefix}.router.classifier.weight",
        mlp + ("router", "router_weights", "w", "kernel"),
        (emb, config.num_experts),
        True,
    )
    for j in range(config.num_experts):
        expert = f"{hf_prefix}.experts.expert_{j}"
        yield (f"{expert}.wi.weight", mlp + ("expert", "wi", "kernel", j), (emb, width), True)
        yield (f"{expert}.wo.weight", mlp + ("expert", "wo", "kernel", j), (width, emb), True)


def _mlp(hf_sublayer: str, layer: tuple, stack: str, index: int, config: T5Config):
    """A Switch layer's MLP entries: T5's dense MLP under `mlp`, or the router and experts."""
    if not config.sparse_layers(stack)[index]:
        return mlp_entries(f"{hf_sublayer}.mlp", layer + ("mlp",), config)
    return _sparse_entries(f"{hf_sublayer}.mlp", layer, config)


def _tensor_map(config: T5Config) -> list[tuple[str, tuple, tuple, bool]]:
    return tensor_map(config, mlp=_mlp)


def _stack_experts(node):
    """Nested params whose expert kernels are {index: [in, out]} -> [experts, in, out]."""
    if isinstance(node, dict) and node and all(isinstance(k, int) for k in node):
        return np.stack([node[j] for j in sorted(node)])
    if isinstance(node, dict):
        return {k: _stack_experts(v) for k, v in node.items()}
    return node


def _split_experts(params: dict, config: T5Config) -> dict:
    """Per-layer params whose expert kernels are split into {index: [in, out]} (the entries'
    paths)."""

    def split(node, path=()):
        if isinstance(node, dict):
            return {k: split(v, path + (k,)) for k, v in node.items()}
        if "expert" in path and path[-1] == "kernel":
            return {j: np.asarray(node[j]) for j in range(config.num_experts)}
        return node

    return split(unstack_layers(params, config))


def params_from_hf_state_dict(state_dict: dict, config: T5Config) -> dict:
    """T5X-named nested params (float32 numpy) from a transformers Switch state dict."""
    per_layer = dataclasses.replace(config, scan_layers=False)
    ignorable = set(_EMBEDDING_ALIASES)
    if config.logits_via_embedding:
        ignorable.add("lm_head.weight")  # the tied head, saved beside `shared.weight`
    params = params_from_entries(state_dict, per_layer, _tensor_map(config), ignorable)
    return stack_layers(_stack_experts(params), config)


def params_to_hf_state_dict(params: dict, config: T5Config) -> dict[str, np.ndarray]:
    """A transformers Switch state dict (float32 numpy, HF names) from T5X-named params."""
    per_layer = dataclasses.replace(config, scan_layers=False)
    return state_dict_from_entries(_split_experts(params, config), per_layer, _tensor_map(config))
