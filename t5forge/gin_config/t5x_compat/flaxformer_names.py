"""Every Flaxformer gin name t5forge understands, and what happens to each of its parameters.

Flaxformer's model files (`flaxformer/t5x/configs/{t5,longt5,moe}/...`) describe a network as
a tree of layers (`t5_architecture.Encoder.layer_factory = @t5_architecture.EncoderLayer`,
`dense.MlpBlock.intermediate_dim = %MLP_DIM`). t5forge's network is one T5Config, so each
parameter that sizes or switches the model is a `field` rule: moved onto that T5Config field
whatever the layer or scope it was bound on, and refused when two bindings of one field
disagree (an attention dtype apart from the MLP's). Parameters that wire the tree are
`reference` rules (accepted when they name the layer t5forge builds there); the rest are
honoured, equivalent, or reported. A field of a model feature t5forge lacks (LongT5's encoder
attention, mixture-of-experts layers) refuses the file in one line naming the feature.
"""

from __future__ import annotations

from t5forge.gin_config.t5x_compat import flaxformer_objects as objects
from t5forge.gin_config.t5x_compat.name_entry import T5XName
from t5forge.gin_config.t5x_compat.objects import configured_elsewhere
from t5forge.gin_config.t5x_compat.rules import (
    Rule,
    equivalent,
    field,
    honoured,
    names_one_of,
    otherwise_text,
    reference,
)

LONGT5 = "LongT5's local/transient-global encoder attention"
MOE = "mixture-of-experts layers"

T5 = "flaxformer.architectures.t5.t5_architecture"
LONG = "flaxformer.architectures.longt5"
SPARSE = "flaxformer.architectures.moe"
COMPONENTS = "flaxformer.components"
ATTENTION = f"{COMPONENTS}.attention.dense_attention.MultiHeadDotProductAttention"
MLP = f"{COMPONENTS}.dense.MlpBlock"
DROPOUT = "flax.linen.Dropout"
LAYER_NORM = f"{COMPONENTS}.layer_norm.T5LayerNorm"
RELATIVE_BIASES = f"{COMPONENTS}.relative_position_biases.RelativePositionBiases"
GENERAL_BIASES = f"{LONG}.relative_position_biases_general.RelativePositionBiasesGeneral"

INIT = (
    "t5forge initialises as T5X's T5 network does: kernels variance_scaling(1.0, 'fan_in', "
    "'truncated_normal') (queries divided by sqrt(head_dim)), token embeddings normal(1.0), "
    "relative position biases variance_scaling(1.0, 'fan_avg', 'uniform')"
)
NO_BIAS = "T5's projections have no biases"
AXES = "t5forge partitions parameters and activations by its logical axis rules"
LAYOUT = "t5forge builds T5's layer: pre-norm T5LayerNorm, dropout, residual"
_ONE_DROPOUT = "t5forge drops out once after the MLP (the layer's dropout), not inside it too"


def _initializer() -> Rule:
    """An initializer named by reference: its own bindings (flax.linen.initializers.*) say
    whether t5forge draws the same; anything else is reported."""
    return Rule(
        accepts=lambda v: getattr(getattr(v, "configurable", None), "selector", "").startswith(
            "flax.linen.initializers."
        ),
        reason=INIT,
        summary="accepted when a flax.linen.initializers reference (its own rows say what "
        f"t5forge draws); otherwise {otherwise_text(False, INIT)}",
    )


def _only(*selectors, what: str) -> Rule:
    return reference(*selectors, refuse=f"t5forge builds {what} here")


_DROPOUT_FACTORY = _only(DROPOUT, what="flax.linen.Dropout (T5's dropout)")
_LAYER_NORM = _only(LAYER_NORM, what="T5's layer norm (layer_norm.T5LayerNorm)")
_NO_POSITION_EMBEDDING = honoured(None, refuse="T5 has no absolute position embeddings")
_ACTIVATION_PARTITIONING = honoured(1, warn=AXES)
_BIASES_ONLY = "t5forge builds T5's bucketed relative position biases (or none) here"
# T5's one table per stack, or (scanned MoE stacks) one per layer.
_PER_LAYER_BIASES = field(
    "relative_attention_per_layer",
    convert=lambda v: v is not None,
    accepts=names_one_of(None, RELATIVE_BIASES),
    refuse=_BIASES_ONLY,
)
_SHARED_BIASES = field(
    "relative_attention_per_layer",
    convert=lambda v: v is None,
    accepts=names_one_of(None, RELATIVE_BIASES),
    refuse=_BIASES_ONLY,
)
_REMAT = field("remat_policy", convert=lambda v: "none" if v in (None, "legacy") else v)
_DTYPE = field("dtype")


def _stack(num_layers: str) -> dict[str, Rule]:
    """The parameters every Flaxformer encoder or decoder stack shares."""
    return {
        "num_layers": field(num_layers),
        "layer_norm_factory": _LAYER_NORM,
        "position_embedder_factory": _NO_POSITION_EMBEDDING,
        "shared_relative_position_bias_factory": _SHARED_BIASES,
        "dtype": _DTYPE,
        "scan_layers": field("scan_layers"),
        "layer_remat": _REMAT,
    }


def _encoder(layers: tuple) -> dict[str, Rule]:
    return {
        **_stack("num_encoder_layers"),
        "layer_factory": _only(*layers, what="T5's encoder layer"),
        "input_dropout_factory": _DROPOUT_FACTORY,
        "output_dropout_factory": _DROPOUT_FACTORY,
    }


def _decoder(layers: tuple) -> dict[str, Rule]:
    return {
        **_stack("num_decoder_layers"),
        "layer_factory": _only(*layers, what="T5's decoder layer"),
        "dropout_factory": _DROPOUT_FACTORY,
        # A separate output projection, or logits through the shared embedding (T5 1.0).
        "output_logits_factory": field("logits_via_embedding", convert=lambda v: v is None),
    }


_MLPS = (MLP, f"{SPARSE}.moe_layers.MoeLayer")


def _layer(*attentions: str) -> dict[str, Rule]:
    """The parameters of an encoder or decoder layer; `attentions` name its attention slots."""
    return {
        **{a: _only(ATTENTION, what="T5's multi-head attention") for a in attentions},
        "mlp": _only(*_MLPS, what="T5's MLP (dense.MlpBlock)"),
        "dropout_factory": _DROPOUT_FACTORY,
        "layer_norm_factory": _LAYER_NORM,
        "activation_partitioning_dims": _ACTIVATION_PARTITIONING,
        "scanned": equivalent(),  # t5forge scans whole stacks by T5Config.scan_layers
        "relative_position_bias_factory": _PER_LAYER_BIASES,
        "parallel": honoured(False, refuse=LAYOUT),
        "sow_intermediates": honoured(False, warn="t5forge keeps no intermediates"),
    }


# Flaxformer's chunked attention (t5/architectures/flash_attention.gin) computes the same
# softmax(QK)V as the plain one; t5forge picks its own kernel.
_MEMORY_EFFICIENT = reference(
    None,
    *(
        f"{COMPONENTS}.attention.memory_efficient_attention.dot_product_attention_{kind}"
        for kind in ("multihead", "multiquery")
    ),
    refuse="t5forge picks its attention kernel by T5Config.attention_implementation",
)


def _attention() -> dict[str, Rule]:
    """What every Flaxformer attention binds."""
    return {
        "num_heads": field("num_heads"),
        "head_dim": field("head_dim"),
        "dtype": _DTYPE,
        "kernel_init": _initializer(),
        "bias_init": equivalent(),  # no biases (use_bias)
        "use_bias": honoured(False, refuse=NO_BIAS),
        "broadcast_dropout": honoured(
            True, warn="t5forge shares one attention dropout mask across the batch"
        ),
        "dropout_rate": field("dropout_rate"),
        "float32_logits": honoured(False, warn="attention logits are computed in T5Config.dtype"),
        "rescale_logits": field("scale_attn_logits"),
        "attention_fn": _MEMORY_EFFICIENT,
    }


def _relative_biases() -> dict[str, Rule]:
    return {
        "num_heads": field("num_heads"),
        "dtype": _DTYPE,
        "num_buckets": field("relative_attention_num_buckets"),
        "max_distance": field("relative_attention_max_distance"),
        "embedding_init": _initializer(),
    }


def _mlp() -> dict[str, Rule]:
    return {
        "use_bias": honoured(False, refuse=NO_BIAS),
        "intermediate_dim": field("mlp_dim"),
        "activations": field("mlp_activations", convert=tuple),
        "kernel_init": _initializer(),
        "bias_init": equivalent(),
        "intermediate_dropout_rate": field("dropout_rate"),
        "final_dropout_rate": Rule(
            accepts=lambda v: v == 0,
            reason=_ONE_DROPOUT,
            summary=f"honoured when 0; otherwise {otherwise_text(False, _ONE_DROPOUT)}",
        ),
        "dtype": _DTYPE,
        **{
            p: equivalent()
            for p in (
                "input_axis_name",
                "output_axis_name",
                "intermediate_axis_name",
                "data_sharding_constraints",
                "activation_partitioning_dims",
            )
        },
    }


def _init(**t5_values) -> dict[str, Rule]:
    """An initializer's parameters, honoured where they are what t5forge draws."""
    return {p: honoured(v, warn=INIT) for p, v in t5_values.items()}


_KERNEL = {"scale": 1.0, "mode": "fan_in", "distribution": "truncated_normal"}
_ROUTER = {
    "router_weights": _only(f"{SPARSE}.routing.RouterWeights", what="T5X's router weights"),
    "num_selected_experts": field("num_selected_experts", feature=MOE),
    "jitter_noise": field("router_jitter_noise", feature=MOE),
    "dtype": honoured("float32", "bfloat16", warn="t5forge routes in float32"),
    "ignore_padding_tokens": honoured(
        False, warn="t5forge's routers route padding tokens like any other (T5X's default)"
    ),
}
_ROUTER_SCOPES = {
    f"sparse_{stack}": {
        "batch_prioritized_routing": field(f"{stack}_batch_prioritized_routing", feature=MOE)
    }
    for stack in ("encoder", "decoder")
}
_ROUTERS = (
    f"{SPARSE}.routing.TokensChooseMaskedRouter",
    f"{SPARSE}.routing.ExpertsChooseMaskedRouter",
)


def _router_kind(value) -> str:
    """'tokens_choose' or 'experts_choose', from the router a MoeLayer names."""
    name = objects.selector_name(value) or ""
    return "experts_choose" if name.startswith("Experts") else "tokens_choose"


def _flaxformer(module: str, name: str, build=None, **kwargs):
    where = f"{module.rsplit('.', 1)[-1]}.{name}"
    return T5XName(
        module,
        name,
        build=build or configured_elsewhere(where, "the architecture's bindings"),
        **kwargs,
    )


def flaxformer_names() -> tuple:
    """The table (T5XName entries; see names.py)."""
    stack_tops = {
        "encoder_factory": _only(
            f"{T5}.Encoder", f"{SPARSE}.moe_architecture.SparseEncoder", what="T5's encoder"
        ),
        "decoder_factory": _only(
            f"{T5}.Decoder", f"{SPARSE}.moe_architecture.SparseDecoder", what="T5's decoder"
        ),
        "shared_token_embedder_factory": _only(
            f"{COMPONENTS}.embedding.Embed", what="one token embedding, shared"
        ),
        "dtype": _DTYPE,
        "scan_layers": field("scan_layers"),
    }
    encoder_layers = (f"{T5}.EncoderLayer",)
    decoder_layers = (f"{T5}.DecoderLayer",)
    sparse_layer = {
        "extra_mlp": field("sparse_extra_mlp", convert=lambda v: v is not None, feature=MOE)
    }
    long_attention = {
        **_attention(),
        "local_radius": field("local_radius", feature=LONGT5),
    }
    return (
        # ---- flaxformer.architectures.t5.t5_architecture
        _flaxformer(
            T5,
            "EncoderDecoder",
            objects.network("EncoderDecoder"),
            rules=stack_tops,
            builds_config=True,
        ),
        _flaxformer(T5, "DecoderOnly", rules={"scan_layers": field("scan_layers")}),
        _flaxformer(T5, "Encoder", rules=_encoder(encoder_layers)),
        _flaxformer(T5, "Decoder", rules=_decoder(decoder_layers)),
        _flaxformer(T5, "EncoderLayer", rules=_layer("attention")),
        _flaxformer(
            T5, "DecoderLayer", rules=_layer("self_attention", "encoder_decoder_attention")
        ),
        # ---- flaxformer.components
        _flaxformer(
            f"{COMPONENTS}.attention.dense_attention",
            "MultiHeadDotProductAttention",
            rules=_attention(),
        ),
        _flaxformer(
            f"{COMPONENTS}.attention.dense_attention",
            "MultiQueryDotProductAttention",
            rules={"attention_fn": _MEMORY_EFFICIENT},
        ),
        *(
            _flaxformer(
                f"{COMPONENTS}.attention.memory_efficient_attention",
                f"dot_product_attention_{kind}",
            )
            for kind in ("multihead", "multiquery")
        ),
        _flaxformer(
            f"{COMPONENTS}.relative_position_biases",
            "RelativePositionBiases",
            rules=_relative_biases(),
        ),
        _flaxformer(
            f"{COMPONENTS}.dense",
            "MlpBlock",
            rules=_mlp(),
            scoped_rules={
                "expert": {
                    "intermediate_dim": field("expert_mlp_dim", feature=MOE),
                    "intermediate_dropout_rate": field("expert_dropout_rate", feature=MOE),
                    "dtype": honoured(
                        "float32", "bfloat16", warn="experts compute in T5Config.dtype"
                    ),
                }
            },
        ),
        _flaxformer(
            f"{COMPONENTS}.dense",
            "DenseGeneral",
            rules={
                "features": field("vocab_size"),
                "use_bias": honoured(False, refuse=NO_BIAS),
                "dtype": honoured("float32", warn="t5forge computes the logits in float32"),
                "kernel_init": _initializer(),
                "bias_init": equivalent(),
                "kernel_axis_names": equivalent(),
            },
        ),
        _flaxformer(
            f"{COMPONENTS}.embedding",
            "Embed",
            rules={
                "num_embeddings": field("vocab_size"),
                "features": field("emb_dim"),
                "cast_input_dtype": equivalent(),  # token ids are integers either way
                "dtype": _DTYPE,
                "attend_dtype": honoured("float32", warn="t5forge computes tied logits in float32"),
                "embedding_init": _initializer(),
                "one_hot": equivalent(),  # a gather or a one-hot product: the same embedding
                "name": equivalent(),
            },
        ),
        _flaxformer(
            f"{COMPONENTS}.layer_norm",
            "T5LayerNorm",
            rules={"dtype": _DTYPE, "epsilon": field("layer_norm_epsilon")},
        ),
        # ---- flax.linen: the real objects, registered by gin itself
        *(
            _flaxformer(
                "flax.linen", name, registered_by_gin=True, rules=rules, scoped_rules=scoped
            )
            for name, rules, scoped in (
                (
                    "Dropout",
                    {
                        "rate": field("dropout_rate"),
                        "broadcast_dims": honoured(
                            (-2,), warn="t5forge shares one dropout mask along the length axis"
                        ),
                    },
                    {},
                ),
                (
                    "initializers.variance_scaling",
                    _init(**_KERNEL),
                    {
                        "attention_kernel_init": _init(
                            scale=1.0, mode="fan_in", distribution="truncated_normal"
                        ),
                        "relative_position_bias_init": _init(
                            scale=1.0, mode="fan_avg", distribution="uniform"
                        ),
                    },
                ),
                (
                    "initializers.normal",
                    _init(stddev=1.0),
                    {"bias_init": {"stddev": equivalent()}},  # no biases
                ),
            )
        ),
        # ---- flaxformer.architectures.longt5
        _flaxformer(
            f"{LONG}.longt5_architecture",
            "LongEncoderDecoder",
            objects.network("LongEncoderDecoder"),
            builds_config=True,
            rules={
                **stack_tops,
                "encoder_factory": _only(
                    f"{LONG}.longt5_architecture.LongEncoder", what="LongT5's encoder"
                ),
            },
        ),
        _flaxformer(
            f"{LONG}.longt5_architecture",
            "LongEncoder",
            rules={
                **{
                    k: v
                    for k, v in _encoder((f"{LONG}.longt5_architecture.LongEncoderLayer",)).items()
                    if k != "shared_relative_position_bias_factory"
                },
                "shared_relpos_bias_factory": _only(
                    GENERAL_BIASES, what="LongT5's relative position biases"
                ),
                "shared_side_relpos_bias_factory": reference(
                    None, GENERAL_BIASES, refuse="t5forge builds LongT5's side biases"
                ),
            },
        ),
        _flaxformer(
            f"{LONG}.longt5_architecture",
            "LongEncoderLayer",
            rules={
                **_layer(),
                "attention_factory": field(
                    "encoder_attention",
                    convert=lambda v: {
                        "EncoderLocalSelfAttention": "local",
                        "EtcTransientGlobalSelfAttention": "transient_global",
                    }.get(objects.selector_name(v), objects.selector_name(v)),
                    feature=LONGT5,
                ),
            },
        ),
        _flaxformer(f"{LONG}.long_attention", "EncoderLocalSelfAttention", rules=long_attention),
        _flaxformer(
            f"{LONG}.long_attention",
            "EtcTransientGlobalSelfAttention",
            rules={
                **long_attention,
                "tokens_per_block": field("global_block_size", feature=LONGT5),
            },
        ),
        _flaxformer(
            f"{LONG}.relative_position_biases_general",
            "RelativePositionBiasesGeneral",
            rules=_relative_biases(),
        ),
        # ---- flaxformer.architectures.moe
        *(
            _flaxformer(
                f"{SPARSE}.moe_architecture",
                f"Sparse{stack.title()}",
                rules={
                    **(
                        _encoder(encoder_layers) if stack == "encoder" else _decoder(decoder_layers)
                    ),
                    "num_sparse_layers": field(f"num_sparse_{stack}_layers", feature=MOE),
                    "sparse_layout": field(
                        f"{stack}_sparse_layout", convert=objects.layout_name, feature=MOE
                    ),
                    "sparse_layer_factory": _only(
                        f"{SPARSE}.moe_architecture.Sparse{stack.title()}Layer",
                        what=f"T5X's sparse {stack} layer",
                    ),
                },
            )
            for stack in ("encoder", "decoder")
        ),
        _flaxformer(
            f"{SPARSE}.moe_architecture",
            "SparseEncoderLayer",
            rules={**_layer("attention"), **sparse_layer},
        ),
        _flaxformer(
            f"{SPARSE}.moe_architecture",
            "SparseDecoderLayer",
            rules={**_layer("self_attention", "encoder_decoder_attention"), **sparse_layer},
        ),
        _flaxformer(
            f"{SPARSE}.moe_layers",
            "MoeLayer",
            rules={
                "num_experts": field("num_experts", feature=MOE),
                "max_group_size": field("expert_group_size", feature=MOE),
                "train_capacity_factor": field("train_capacity_factor", feature=MOE),
                "eval_capacity_factor": field("eval_capacity_factor", feature=MOE),
                "min_expert_capacity": field("min_expert_capacity", feature=MOE),
                "expert": _only(MLP, what="T5's MLP as each expert"),
                "num_model_partitions": equivalent(),  # the partitioner's model axis
                "num_expert_partitions": equivalent(),  # the partitioner's expert axis
                "dtype": honoured("float32", "bfloat16", warn="experts compute in T5Config.dtype"),
                "router": _only(*_ROUTERS, what="T5X's routers"),
            },
            scoped_rules={
                f"sparse_{stack}": {
                    "router": field(f"{stack}_router", convert=_router_kind, feature=MOE)
                }
                for stack in ("encoder", "decoder")
            },
        ),
        *(
            _flaxformer(f"{SPARSE}.routing", name, rules=_ROUTER, scoped_rules=_ROUTER_SCOPES)
            for name in ("TokensChooseMaskedRouter", "ExpertsChooseMaskedRouter")
        ),
        _flaxformer(
            f"{SPARSE}.routing",
            "RouterWeights",
            rules={
                "use_bias": honoured(False, refuse=NO_BIAS),
                "dtype": honoured("float32", warn="t5forge routes in float32"),
                "kernel_init": _initializer(),
                "bias_init": equivalent(),
            },
        ),
    )
