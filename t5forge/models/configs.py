"""Model hyperparameters: `T5Config` and the named presets of every T5 family.

One frozen dataclass describes every architecture t5forge builds, so a checkpoint, a gin file
and a preset name all reduce to the same value. The presets reproduce the published models
(T5 1.0, T5 1.1, mT5, ByT5, umT5) and a decoder-only stack with T5 1.1 dimensions; the gin files
in `t5forge/configs/models/<family>/<size>.gin` bind the same values (a test keeps them equal).
"""

from __future__ import annotations

import dataclasses
import difflib

from t5forge.errors import ConfigError

ARCHITECTURES = ("encoder_decoder", "decoder_only")
DTYPES = ("bfloat16", "float32")
# What each layer keeps for the backward pass (network.py maps them onto jax.checkpoint_policies):
# T5X's 'none', 'minimal', 'proj' and 'full', and jax's 'dots_saveable'.
REMAT_POLICIES = ("none", "minimal", "proj", "dots_saveable", "full")
ATTENTION_IMPLEMENTATIONS = ("auto", "xla", "cudnn", "explicit")
ACTIVATIONS = ("relu", "gelu", "silu", "swish", "tanh", "linear")


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

    def __post_init__(self):
        # gin and JSON hand us lists; the config must stay hashable (it is a static jit argument).
        object.__setattr__(self, "mlp_activations", tuple(self.mlp_activations))
        if self.scale_logits == self.logits_via_embedding:  # one spelling per network
            object.__setattr__(self, "scale_logits", None)
        self._validate()

    def _validate(self):
        positive = (
            "vocab_size",
            "emb_dim",
            "num_heads",
            "num_decoder_layers",
            "head_dim",
            "mlp_dim",
            "relative_attention_num_buckets",
            "relative_attention_max_distance",
        )
        for name in positive:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ConfigError(f"T5Config.{name} must be a positive integer, got {value!r}")
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

    @property
    def logits_scaled(self) -> bool:
        """Whether the logits are divided by sqrt(emb_dim) (see `scale_logits`)."""
        return self.logits_via_embedding if self.scale_logits is None else self.scale_logits

    @property
    def is_decoder_only(self) -> bool:
        """True for the decoder-only (LM / prefix-LM) architecture."""
        return self.architecture == "decoder_only"


_T5_1_1 = dict(
    vocab_size=32128, head_dim=64, mlp_activations=("gelu", "linear"), logits_via_embedding=False
)
_T5_1_0 = dict(vocab_size=32128, mlp_activations=("relu",), logits_via_embedding=True)
# (emb_dim, num_heads, encoder layers, decoder layers, mlp_dim)
_T5_1_1_SIZES = {
    "tiny": (8, 4, 2, 2, 16),
    "small": (512, 6, 8, 8, 1024),
    "base": (768, 12, 12, 12, 2048),
    "large": (1024, 16, 24, 24, 2816),
    "xl": (2048, 32, 24, 24, 5120),
    "xxl": (4096, 64, 24, 24, 10240),
}
# (emb_dim, num_heads, encoder layers, decoder layers, head_dim, mlp_dim)
_T5_1_0_SIZES = {
    "tiny": (8, 4, 2, 2, 3, 16),
    "small": (512, 8, 6, 6, 64, 2048),
    "base": (768, 12, 12, 12, 64, 3072),
    "large": (1024, 16, 24, 24, 64, 4096),
    "3B": (1024, 32, 24, 24, 128, 16384),
    "11B": (1024, 128, 24, 24, 128, 65536),
}
_BYT5_SIZES = {
    "tiny": (8, 4, 3, 1, 16),
    "small": (1472, 6, 12, 4, 3584),
    "base": (1536, 12, 18, 6, 3968),
    "large": (1536, 16, 36, 12, 3840),
    "xl": (2560, 32, 36, 12, 6720),
    "xxl": (4672, 64, 36, 12, 12352),
}
MT5_VOCAB_SIZE = 250112
UMT5_VOCAB_SIZE = 256384
BYT5_VOCAB_SIZE = 384


def _t5_1_1_style(sizes, size, **family):
    emb, heads, enc, dec, mlp = sizes[size]
    fields = dict(
        _T5_1_1,
        emb_dim=emb,
        num_heads=heads,
        num_encoder_layers=enc,
        num_decoder_layers=dec,
        mlp_dim=mlp,
    )
    if size == "tiny":
        fields["head_dim"] = 3
    fields.update(family)
    return T5Config(**fields)


def _build_presets() -> dict[str, T5Config]:
    presets = {}
    for size, (emb, heads, enc, dec, head_dim, mlp) in _T5_1_0_SIZES.items():
        presets[f"t5_1_0/{size}"] = T5Config(
            **_T5_1_0,
            emb_dim=emb,
            num_heads=heads,
            num_encoder_layers=enc,
            num_decoder_layers=dec,
            head_dim=head_dim,
            mlp_dim=mlp,
        )
    for size in _T5_1_1_SIZES:
        presets[f"t5_1_1/{size}"] = _t5_1_1_style(_T5_1_1_SIZES, size)
        presets[f"mt5/{size}"] = _t5_1_1_style(_T5_1_1_SIZES, size, vocab_size=MT5_VOCAB_SIZE)
        presets[f"byt5/{size}"] = _t5_1_1_style(_BYT5_SIZES, size, vocab_size=BYT5_VOCAB_SIZE)
        presets[f"decoder_only/{size}"] = _t5_1_1_style(
            _T5_1_1_SIZES, size, architecture="decoder_only", num_encoder_layers=0
        )
        if size != "tiny":
            presets[f"umt5/{size}"] = _t5_1_1_style(
                _T5_1_1_SIZES,
                size,
                vocab_size=UMT5_VOCAB_SIZE,
                scan_layers=True,
                remat_policy="minimal",
                relative_attention_per_layer=True,
            )
    return dict(sorted(presets.items()))


PRESETS: dict[str, T5Config] = _build_presets()


def get_config(name: str, **overrides) -> T5Config:
    """The preset called `name` ('<family>/<size>', e.g. 't5_1_1/small'), with fields replaced."""
    if name not in PRESETS:
        close = difflib.get_close_matches(name, PRESETS, n=3, cutoff=0.5)
        hint = f"did you mean {', '.join(close)}?" if close else f"known: {', '.join(PRESETS)}"
        raise ConfigError(f"unknown model config {name!r}; {hint}")
    unknown = sorted(set(overrides) - {f.name for f in dataclasses.fields(T5Config)})
    if unknown:
        raise ConfigError(f"unknown T5Config field(s) {unknown} in overrides for {name!r}")
    return dataclasses.replace(PRESETS[name], **overrides)
