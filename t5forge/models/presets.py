"""The named presets of every T5 family: `get_config('t5_1_1/small')`.

They reproduce the published models (T5 1.0, T5 1.1, mT5, ByT5, umT5) and a decoder-only stack
with T5 1.1 dimensions; the gin files in `t5forge/configs/models/<family>/<size>.gin` bind the
same values (a test keeps them equal).
"""

from __future__ import annotations

import dataclasses
import difflib

from t5forge.errors import ConfigError
from t5forge.models.configs import T5Config
from t5forge.models.t5gemma_presets import T5GEMMA_PRESET_FIELDS

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
    for name, fields in T5GEMMA_PRESET_FIELDS.items():
        presets[name] = T5Config(**fields)
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
