"""Model hyperparameters: `T5Config`, the values each field may take, and their checks.

One frozen dataclass describes every architecture t5forge builds, so a checkpoint, a gin file
and a preset name (presets.py) all reduce to the same value.
"""

from __future__ import annotations

import dataclasses

from t5forge.errors import ConfigError
from t5forge.models.sparse_layout import sparse_layer_flags

ARCHITECTURES = ("encoder_decoder", "decoder_only")
DTYPES = ("bfloat16", "float32")
# What each layer keeps for the backward pass (network.py maps them onto jax.checkpoint_policies):
# T5X's 'none', 'minimal', 'proj' and 'full', and jax's 'dots_saveable'.
REMAT_POLICIES = ("none", "minimal", "proj", "dots_saveable", "full")
ATTENTION_IMPLEMENTATIONS = ("auto", "xla", "cudnn", "explicit")
ACTIVATIONS = ("relu", "gelu", "silu", "swish", "tanh", "linear")
# Per-layer attention kinds (transformers' `layer_types` names): every position, or a window.
FULL_ATTENTION, SLIDING_ATTENTION = "full_attention", "sliding_attention"
LAYER_TYPES = (FULL_ATTENTION, SLIDING_ATTENTION)
# The fields past T5 (T5Gemma's); each defaults to what T5 computes.
GEMMA_SWITCHES = (
    "num_kv_heads",
    "rope_theta",
    "query_pre_attn_scalar",
    "attn_logit_softcap",
    "final_logit_softcap",
    "encoder_layer_types",
    "decoder_layer_types",
    "sliding_window",
    "zero_centered_norm",
    "layer_norm_epsilon",
    "post_norms",
    "separate_embeddings",
    "scale_embeddings",
    "decoder_start_token_id",
    "encoder_overrides",
    "qk_norm",
    "rope_local_theta",
    "rope_linear_factor",
    "encoder_window",
    "merged_attention",
    "eoi_token_id",
)
# How an encoder's sliding window lies around its query: |q - k| <= W (T5Gemma), or W keys of
# which (W + 1) // 2 at or before the query (T5Gemma 2).
ENCODER_WINDOWS = ("symmetric", "split")
# The widths an encoder may hold apart from the decoder (T5Gemma 9b-2b: a 9b encoder, 2b decoder).
ENCODER_OVERRIDABLE = ("emb_dim", "num_heads", "num_kv_heads", "head_dim", "mlp_dim")
# Mixture of experts (docs/moe.md). Where a stack's sparse layers lie: Flaxformer's layouts
# (moe_enums.LayerLayout, lower case) and Hugging Face's SwitchTransformers rule ('huggingface').
SPARSE_LAYOUTS = ("mixed", "top", "bottom", "middle", "huggingface")
# How a sparse layer's router assigns: tokens choose their top-k experts, or experts choose
# their top-capacity tokens (Flaxformer's TokensChoose/ExpertsChooseMaskedRouter).
TOKENS_CHOOSE, EXPERTS_CHOOSE = "tokens_choose", "experts_choose"
ROUTERS = (TOKENS_CHOOSE, EXPERTS_CHOOSE)
# What a routing group is: one sequence with a fixed expert_capacity (Hugging Face), or the
# tokens of the whole batch regrouped with a capacity from the capacity factor (T5X).
SEQUENCE_GROUPS, BATCH_GROUPS = "sequence", "batch"
ROUTING_GROUPS = (SEQUENCE_GROUPS, BATCH_GROUPS)
# The encoder's self-attention (LongT5's switch, models/long_attention.py): every position (T5),
# LongT5's local window, or the window plus transient global tokens.
FULL_ENCODER_ATTENTION, LOCAL_ATTENTION, TRANSIENT_GLOBAL_ATTENTION = (
    "full",
    "local",
    "transient_global",
)
ENCODER_ATTENTIONS = (FULL_ENCODER_ATTENTION, LOCAL_ATTENTION, TRANSIENT_GLOBAL_ATTENTION)


@dataclasses.dataclass(frozen=True)
class T5Config:
    """Every hyperparameter of a T5-family network; params are float32, activations `dtype`.

    `dtype`, `remat_policy`, `scan_layers` and `attention_implementation` change how the network
    is computed, not what it computes (docs/performance.md).
    """

    vocab_size: int
    emb_dim: int
    num_heads: int
    num_encoder_layers: int
    num_decoder_layers: int
    head_dim: int
    mlp_dim: int
    mlp_activations: tuple[str, ...] = ("gelu", "linear")
    dropout_rate: float = 0.0
    logits_via_embedding: bool = False
    # Divide the logits by sqrt(emb_dim). None (what an equal explicit value becomes): exactly
    # when logits_via_embedding, as T5X does. transformers 5 sets it apart from the tie
    # (`scale_decoder_outputs`): a T5 1.1-style config there ties the head without the scale.
    scale_logits: bool | None = None
    dtype: str = "bfloat16"
    relative_attention_num_buckets: int = 32
    relative_attention_max_distance: int = 128
    # umT5 gives every layer its own relative position table; T5/mT5/ByT5 share one per stack.
    relative_attention_per_layer: bool = False
    scan_layers: bool = False
    remat_policy: str = "none"
    architecture: str = "encoder_decoder"
    attention_implementation: str = "auto"
    # Divide attention logits by sqrt(head_dim), as T5X's GPU network (contrib/gpu) can; T5
    # folds that factor into the query initializer instead, so it is off for every T5.
    scale_attn_logits: bool = False
    # The Gemma switches (T5Gemma); each default is T5's behaviour. Keys/values heads shared by
    # groups of query heads (None: one per query head).
    num_kv_heads: int | None = None
    # Rotary position embeddings with this base instead of relative position buckets (None: T5).
    rope_theta: float | None = None
    # Queries times query_pre_attn_scalar**-0.5 (Gemma's attention scale).
    query_pre_attn_scalar: float | None = None
    # cap * tanh(x / cap) on the attention logits and on the output logits.
    attn_logit_softcap: float | None = None
    final_logit_softcap: float | None = None
    # One of LAYER_TYPES per layer (empty: all full); sliding layers see `sliding_window`
    # positions: |q - k| <= W in the encoder, q - W < k <= q in the decoder, as transformers.
    encoder_layer_types: tuple[str, ...] = ()
    decoder_layer_types: tuple[str, ...] = ()
    sliding_window: int | None = None
    # Gemma's RMSNorm multiplies by (1 + scale), scale initialised to 0; its epsilon.
    zero_centered_norm: bool = False
    layer_norm_epsilon: float = 1e-6
    # A norm after attention and after the MLP too, before the residual add ("sandwich").
    post_norms: bool = False
    # The encoder and the decoder embed with tables of their own, scaled by sqrt(width).
    separate_embeddings: bool = False
    scale_embeddings: bool = False
    # The token the decoder starts from: T5X's shifted-right 0 is read as this one (T5Gemma: 2).
    decoder_start_token_id: int = 0
    # (field, value) pairs where the encoder's widths differ from the decoder's (the fields
    # above are the decoder's); the decoder's cross-attention projects the encoder's width.
    encoder_overrides: tuple[tuple[str, int], ...] = ()
    # T5Gemma 2's (Gemma 3's) switches: RMSNorms over head_dim on queries and keys; another RoPE
    # base for sliding layers (None: rope_theta); full-attention layers' positions divided by
    # rope_linear_factor (Gemma 3's 'linear' RoPE scaling: 8 in the published T5Gemma 2
    # checkpoints; None: not scaled); the encoder window's shape (ENCODER_WINDOWS);
    # the decoder attending to its own positions and the encoder's in one softmax with one set
    # of projections; a token (end of image) embedded by a learned vector of its own.
    qk_norm: bool = False
    rope_local_theta: float | None = None
    rope_linear_factor: float | None = None
    encoder_window: str = "symmetric"
    merged_attention: bool = False
    eoi_token_id: int | None = None
    # Mixture of experts (docs/moe.md); num_experts = 0 is a dense model and leaves every other
    # MoE field unread. Sparse layers replace the MLP by `num_experts` experts of width
    # expert_mlp_dim (None: mlp_dim) behind a router; which layers, per stack: the count and
    # the layout (SPARSE_LAYOUTS).
    num_experts: int = 0
    expert_mlp_dim: int | None = None
    num_sparse_encoder_layers: int = 0
    num_sparse_decoder_layers: int = 0
    encoder_sparse_layout: str = "mixed"
    decoder_sparse_layout: str = "mixed"
    # Routing (ROUTERS) per stack; tokens choose `num_selected_experts` each (1: Switch);
    # batch-prioritised routing fills the experts by router confidence, not token order.
    encoder_router: str = TOKENS_CHOOSE
    decoder_router: str = TOKENS_CHOOSE
    num_selected_experts: int = 1
    encoder_batch_prioritized_routing: bool = False
    decoder_batch_prioritized_routing: bool = False
    # ROUTING_GROUPS: 'sequence' (HF: each sequence a group, capacity expert_capacity, router
    # losses pooled per stack and summed) or 'batch' (T5X: groups of at most expert_group_size
    # tokens of the batch, capacity max(round(factor * group / experts), min_expert_capacity),
    # router losses averaged over the sparse layers).
    routing_groups: str = BATCH_GROUPS
    expert_capacity: int | None = None
    expert_group_size: int = 4096
    train_capacity_factor: float = 1.0
    eval_capacity_factor: float = 1.0
    min_expert_capacity: int = 4
    # Router inputs times uniform(1 - j, 1 + j) while training; the router losses' weights in
    # the training loss (T5X's router_z_loss_factor and aux_loss_factor, HF's *_coef).
    router_jitter_noise: float = 0.0
    router_z_loss_factor: float = 0.0
    aux_loss_factor: float = 0.0
    # Dropout inside the experts (None: dropout_rate); ST-MoE's dense MLP after each sparse one.
    expert_dropout_rate: float | None = None
    sparse_extra_mlp: bool = False
    # LongT5 (ENCODER_ATTENTIONS; the decoder is T5's either way): 'local' lets each input
    # position see local_radius positions either side, computed in blocks of local_radius + 1
    # over a 3-block window; 'transient_global' adds one global token per global_block_size
    # inputs (their sum, normed), seen by every position.
    encoder_attention: str = FULL_ENCODER_ATTENTION
    local_radius: int = 127
    global_block_size: int = 16

    def __post_init__(self):
        # gin and JSON hand us lists; the config must stay hashable (it is a static jit argument).
        object.__setattr__(self, "mlp_activations", tuple(self.mlp_activations))
        for name in ("encoder_layer_types", "decoder_layer_types"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        overrides = self.encoder_overrides
        pairs = overrides.items() if isinstance(overrides, dict) else overrides
        object.__setattr__(self, "encoder_overrides", tuple(sorted((str(k), v) for k, v in pairs)))
        if self.scale_logits == self.logits_via_embedding:  # one spelling per network
            object.__setattr__(self, "scale_logits", None)
        self._validate()

    def _require_positive_integers(self, *names: str):
        for name in names:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ConfigError(f"T5Config.{name} must be a positive integer, got {value!r}")

    def _validate(self):
        self._require_positive_integers(
            "vocab_size",
            "emb_dim",
            "num_heads",
            "num_decoder_layers",
            "head_dim",
            "mlp_dim",
            "relative_attention_num_buckets",
            "relative_attention_max_distance",
        )
        if self.architecture not in ARCHITECTURES:
            raise ConfigError(
                f"T5Config.architecture must be one of {ARCHITECTURES}, got {self.architecture!r}"
            )
        if self.architecture == "encoder_decoder" and self.num_encoder_layers <= 0:
            raise ConfigError(
                "T5Config.num_encoder_layers must be positive for an "
                f"encoder_decoder model, got {self.num_encoder_layers!r}"
            )
        if self.architecture == "decoder_only" and self.num_encoder_layers != 0:
            raise ConfigError(
                "T5Config.num_encoder_layers must be 0 for a decoder_only model, "
                f"got {self.num_encoder_layers!r}"
            )
        if self.scale_logits is not None and not isinstance(self.scale_logits, bool):
            raise ConfigError(
                f"T5Config.scale_logits must be true, false or None, got {self.scale_logits!r}"
            )
        if not self.mlp_activations:
            raise ConfigError("T5Config.mlp_activations must name at least one activation")
        unknown = [a for a in self.mlp_activations if a not in ACTIVATIONS]
        if unknown:
            raise ConfigError(
                f"T5Config.mlp_activations has unknown {unknown}; choose from {ACTIVATIONS}"
            )
        if not 0.0 <= self.dropout_rate < 1.0:
            raise ConfigError(f"T5Config.dropout_rate must be in [0, 1), got {self.dropout_rate}")
        if self.dtype not in DTYPES:
            raise ConfigError(f"T5Config.dtype must be one of {DTYPES}, got {self.dtype!r}")
        if self.remat_policy not in REMAT_POLICIES:
            raise ConfigError(
                f"T5Config.remat_policy must be one of {REMAT_POLICIES}, got {self.remat_policy!r}"
            )
        if self.attention_implementation not in ATTENTION_IMPLEMENTATIONS:
            raise ConfigError(
                "T5Config.attention_implementation must be one of "
                f"{ATTENTION_IMPLEMENTATIONS}, got {self.attention_implementation!r}"
            )

        self._validate_gemma_switches()
        self._validate_long_attention()

    def _validate_gemma_switches(self):
        kv_heads = self.num_kv_heads
        if kv_heads is not None and (
            not isinstance(kv_heads, int) or kv_heads <= 0 or self.num_heads % kv_heads
        ):
            raise ConfigError(
                f"T5Config.num_kv_heads must be a positive divisor of num_heads "
                f"({self.num_heads}), got {kv_heads!r}"
            )
        for name in (
            "rope_theta",
            "rope_local_theta",
            "rope_linear_factor",
            "query_pre_attn_scalar",
            "attn_logit_softcap",
            "final_logit_softcap",
        ):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not value > 0):
                raise ConfigError(
                    f"T5Config.{name} must be a positive number or None, got {value!r}"
                )
        if self.query_pre_attn_scalar is not None and self.scale_attn_logits:
            raise ConfigError(
                "T5Config.query_pre_attn_scalar and scale_attn_logits both scale the attention "
                "logits; set one of them"
            )
        if self.rope_theta is not None and self.head_dim % 2:
            raise ConfigError(
                f"T5Config.rope_theta rotates pairs of dimensions: head_dim must be even, "
                f"got {self.head_dim}"
            )
        if self.rope_theta is not None and self.relative_attention_per_layer:
            raise ConfigError(
                "T5Config.rope_theta replaces relative position biases; "
                "set relative_attention_per_layer=False with it"
            )
        stacks = (
            ("encoder_layer_types", self.num_encoder_layers),
            ("decoder_layer_types", self.num_decoder_layers),
        )
        for name, num_layers in stacks:
            kinds = getattr(self, name)
            if kinds and len(kinds) != num_layers:
                raise ConfigError(
                    f"T5Config.{name} names {len(kinds)} layers but the stack has {num_layers}"
                )
            unknown = sorted(set(kinds) - set(LAYER_TYPES))
            if unknown:
                raise ConfigError(
                    f"T5Config.{name} has unknown {unknown}; choose from {LAYER_TYPES}"
                )
            if self.scan_layers and len(set(kinds)) > 1:
                raise ConfigError(
                    f"T5Config.scan_layers scans one layer for the whole stack, but {name} mixes "
                    "full and sliding attention; set scan_layers=False"
                )
        sliding = SLIDING_ATTENTION in self.encoder_layer_types + self.decoder_layer_types
        window = self.sliding_window
        if sliding and (not isinstance(window, int) or isinstance(window, bool) or window <= 0):
            raise ConfigError(
                f"T5Config.sliding_window must be a positive integer where layer types name "
                f"{SLIDING_ATTENTION!r}, got {window!r}"
            )
        if not self.layer_norm_epsilon > 0:
            raise ConfigError(
                f"T5Config.layer_norm_epsilon must be positive, got {self.layer_norm_epsilon!r}"
            )
        if not isinstance(self.decoder_start_token_id, int) or self.decoder_start_token_id < 0:
            raise ConfigError(
                "T5Config.decoder_start_token_id must be a token id >= 0, "
                f"got {self.decoder_start_token_id!r}"
            )
        unknown = sorted({k for k, _ in self.encoder_overrides} - set(ENCODER_OVERRIDABLE))
        if unknown:
            raise ConfigError(
                f"T5Config.encoder_overrides has {unknown}; the encoder may differ only in "
                f"{ENCODER_OVERRIDABLE}"
            )
        overridden = dict(self.encoder_overrides)
        if "emb_dim" in overridden and not self.separate_embeddings:
            raise ConfigError(
                "T5Config.encoder_overrides' emb_dim needs separate_embeddings=True: a shared "
                "embedding has one width"
            )
        if self.encoder_window not in ENCODER_WINDOWS:
            raise ConfigError(
                f"T5Config.encoder_window must be one of {ENCODER_WINDOWS}, "
                f"got {self.encoder_window!r}"
            )
        if self.merged_attention and (self.is_decoder_only or "emb_dim" in overridden):
            raise ConfigError(
                "T5Config.merged_attention needs an encoder-decoder whose encoder has the "
                "decoder's width (one set of projections reads both)"
            )
        if self.rope_local_theta is not None and self.rope_theta is None:
            raise ConfigError("T5Config.rope_local_theta needs rope_theta (the full layers' base)")
        if self.rope_linear_factor is not None and self.rope_theta is None:
            raise ConfigError("T5Config.rope_linear_factor scales RoPE: it needs rope_theta")
        if self.encoder_overrides:
            self.encoder_config()  # validates the encoder's widths
        if self.num_experts:
            self._validate_experts()

    def _validate_experts(self):
        """The MoE fields of a sparse config (num_experts > 0); a dense one never reads them."""
        self._require_positive_integers(
            "num_experts", "num_selected_experts", "expert_group_size", "min_expert_capacity"
        )
        if self.num_selected_experts > self.num_experts:
            raise ConfigError(
                f"T5Config.num_selected_experts ({self.num_selected_experts}) cannot exceed "
                f"num_experts ({self.num_experts})"
            )
        if self.expert_mlp_dim is not None and (
            not isinstance(self.expert_mlp_dim, int) or self.expert_mlp_dim <= 0
        ):
            raise ConfigError(
                f"T5Config.expert_mlp_dim must be a positive integer or None, "
                f"got {self.expert_mlp_dim!r}"
            )
        if self.routing_groups not in ROUTING_GROUPS:
            raise ConfigError(
                f"T5Config.routing_groups must be one of {ROUTING_GROUPS}, "
                f"got {self.routing_groups!r}"
            )
        capacity = self.expert_capacity
        if self.routing_groups == SEQUENCE_GROUPS and (
            not isinstance(capacity, int) or isinstance(capacity, bool) or capacity <= 0
        ):
            raise ConfigError(
                "T5Config.routing_groups='sequence' routes with a fixed expert_capacity; "
                f"set it to a positive integer (got {capacity!r})"
            )
        if self.routing_groups == BATCH_GROUPS and capacity is not None:
            raise ConfigError(
                "T5Config.expert_capacity is the fixed capacity of routing_groups='sequence'; "
                "with 'batch' groups the capacity comes from the capacity factors: unset it"
            )
        for name in ("train_capacity_factor", "eval_capacity_factor"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"T5Config.{name} must be positive, got {getattr(self, name)!r}")
        for name in ("router_jitter_noise", "router_z_loss_factor", "aux_loss_factor"):
            if not getattr(self, name) >= 0:
                raise ConfigError(f"T5Config.{name} must be >= 0, got {getattr(self, name)!r}")
        if self.expert_dropout_rate is not None and not 0.0 <= self.expert_dropout_rate < 1.0:
            raise ConfigError(
                f"T5Config.expert_dropout_rate must be in [0, 1) or None, "
                f"got {self.expert_dropout_rate!r}"
            )
        for stack in ("encoder", "decoder"):
            router = getattr(self, f"{stack}_router")
            if router not in ROUTERS:
                raise ConfigError(
                    f"T5Config.{stack}_router must be one of {ROUTERS}, got {router!r}"
                )
            layout = getattr(self, f"{stack}_sparse_layout")
            if layout not in SPARSE_LAYOUTS:
                raise ConfigError(
                    f"T5Config.{stack}_sparse_layout must be one of {SPARSE_LAYOUTS}, "
                    f"got {layout!r}"
                )
            self.sparse_layers(stack)  # validates the count against the stack
        if self.decoder_router == EXPERTS_CHOOSE:
            raise ConfigError(
                "T5Config.decoder_router='experts_choose' lets a token's routing see later "
                "tokens, which breaks a causal decoder (T5X uses it in the encoder only); "
                "use 'tokens_choose' in the decoder"
            )
        if self.scan_layers and any(
            0 < sum(self.sparse_layers(stack)) < len(self.sparse_layers(stack))
            for stack in ("encoder", "decoder")
        ):
            raise ConfigError(
                "T5Config.scan_layers scans one layer for the whole stack, but this stack "
                "mixes sparse and dense MLPs; set scan_layers=False"
            )

    def sparse_layers(self, stack: str) -> tuple[bool, ...]:
        """For each layer of 'encoder' or 'decoder', whether its MLP is a mixture of experts."""
        num_layers = self.num_encoder_layers if stack == "encoder" else self.num_decoder_layers
        if not self.num_experts:
            return (False,) * num_layers
        return sparse_layer_flags(
            num_layers,
            getattr(self, f"num_sparse_{stack}_layers"),
            getattr(self, f"{stack}_sparse_layout"),
            f"T5Config.num_sparse_{stack}_layers",
        )

    def _validate_long_attention(self):
        if self.encoder_attention not in ENCODER_ATTENTIONS:
            raise ConfigError(
                f"T5Config.encoder_attention must be one of {ENCODER_ATTENTIONS}, "
                f"got {self.encoder_attention!r}"
            )
        self._require_positive_integers("local_radius", "global_block_size")
        if not self.is_long_encoder:
            return
        clashes = (
            ("architecture='decoder_only'", self.is_decoder_only),
            ("rope_theta", self.rope_theta is not None),
            ("relative_attention_per_layer", self.relative_attention_per_layer),
            ("encoder_layer_types", SLIDING_ATTENTION in self.encoder_layer_types),
        )
        for name, clashing in clashes:
            if clashing:
                raise ConfigError(
                    f"T5Config.encoder_attention={self.encoder_attention!r} (LongT5) runs with "
                    f"one relative position table per stack and an encoder; unset {name}"
                )

    @property
    def is_long_encoder(self) -> bool:
        """Whether the encoder runs LongT5's local or transient-global attention."""
        return self.encoder_attention != FULL_ENCODER_ATTENTION

    def family_switches(self) -> list[str]:
        """The Gemma switches this config sets away from T5's behaviour (GEMMA_SWITCHES)."""
        defaults = {f.name: f.default for f in dataclasses.fields(self)}
        return [name for name in GEMMA_SWITCHES if getattr(self, name) != defaults[name]]

    def encoder_config(self) -> T5Config:
        """The config the encoder stack runs with: this one, with encoder_overrides applied."""
        if not self.encoder_overrides:
            return self
        return dataclasses.replace(self, encoder_overrides=(), **dict(self.encoder_overrides))

    @property
    def is_sparse(self) -> bool:
        """True when some layer's MLP is a mixture of experts."""
        return any(self.sparse_layers("encoder") + self.sparse_layers("decoder"))

    @property
    def kv_heads(self) -> int:
        """Key/value heads per attention layer (num_heads unless grouped-query attention)."""
        return self.num_heads if self.num_kv_heads is None else self.num_kv_heads

    def layer_types(self, stack: str) -> tuple[str, ...]:
        """The attention kind of each layer of 'encoder' or 'decoder'."""
        kinds = self.encoder_layer_types if stack == "encoder" else self.decoder_layer_types
        num_layers = self.num_encoder_layers if stack == "encoder" else self.num_decoder_layers
        return kinds or (FULL_ATTENTION,) * num_layers

    @property
    def logits_scaled(self) -> bool:
        """Whether the logits are divided by sqrt(emb_dim) (see `scale_logits`)."""
        return self.logits_via_embedding if self.scale_logits is None else self.scale_logits

    @property
    def is_decoder_only(self) -> bool:
        """True for the decoder-only (LM / prefix-LM) architecture."""
        return self.architecture == "decoder_only"
