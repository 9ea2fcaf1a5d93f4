"""The published T5Gemma sizes as T5Config fields, each number read from a released config.json.

Google's `google/t5gemma-*` repositories are gated, so each size's numbers come from a public
copy of its config.json (a fine-tune's, which keeps the architecture, or a published test
fixture), for the 2b and 9b stacks from Gemma 2's own config.json, which T5Gemma's are, and for
the l and xl stacks from Google DeepMind's own T5Gemma configs (the `gemma` library's); the
parameter count each gives is checked against the count published for the checkpoint
(tests/models/test_t5gemma_presets.py). The UL2, PrefixLM and instruction-tuned checkpoints of a
size share one architecture, so one preset serves all four. T5Gemma 2's sizes wait for a
config.json whose source can be named (docs/model-families.md).

Plain field dicts (no T5Config here), so models/configs.py can turn them into presets.
"""

from __future__ import annotations

# What every T5Gemma config.json says alike (b-b's and ml-ml's, below, in full): Gemma's
# 256,000-piece vocabulary, RoPE base 10,000, soft-caps 50 (attention) and 30 (output), a
# 4096-token window on every other layer, (1 + w) RMSNorms with eps 1e-6 before and after each
# block, separate scaled embeddings, the head tied to the decoder's embedding, start token 2.
# The l and xl stacks take these too: DeepMind's configs (below) state the same soft-caps, window,
# post-norms and layer pattern, and pad the Flax table to 256,128 rows; the published parameter
# counts are the 256,000-row ones.
_T5GEMMA = dict(
    vocab_size=256000,
    mlp_activations=("gelu", "linear"),
    logits_via_embedding=True,
    scale_logits=False,
    rope_theta=10000.0,
    attn_logit_softcap=50.0,
    final_logit_softcap=30.0,
    sliding_window=4096,
    zero_centered_norm=True,
    layer_norm_epsilon=1e-6,
    post_norms=True,
    separate_embeddings=True,
    scale_embeddings=True,
    decoder_start_token_id=2,
)

# One Gemma stack: (hidden_size, num_attention_heads, num_key_value_heads, head_dim,
# intermediate_size, num_hidden_layers, query_pre_attn_scalar), as its config.json names them.
_STACKS = {
    # T5Gemma S: a fine-tune's KerasHub config of the S-S checkpoint,
    # https://huggingface.co/AtharvaMate/nl-sql/blob/main/task.json (backbone.config: encoder_*
    # and decoder_* widths, query_pre_attn_scalar 64), and google/gemma.cpp PR #947's T5Gemma S-S.
    "s": (512, 8, 8, 64, 1024, 8, 64),
    # T5Gemma B: https://huggingface.co/cp500/mece/blob/main/config.json (a T5Gemma B-B
    # fine-tune's config.json, encoder and decoder sub-configs in full).
    "b": (768, 12, 12, 64, 2048, 12, 64),
    # T5Gemma ML: google/t5gemma-ml-ml-prefixlm's config.json as a test fixture of
    # oracle/accelerated-data-science@eec364981941aadd89d2a785ee9df608f20740b8,
    # tests/unitary/with_extras/aqua/test_data/recommend/config-json-files/t5gemma-ml-ml-prefixlm.json
    "ml": (1152, 4, 4, 256, 6912, 26, 256),
    # T5Gemma L and XL: Google DeepMind's T5Gemma configs, google-deepmind/gemma@e552410c50a38edc
    # df8122f96321373cafe9a252, gemma/research/t5gemma/config.py (GemmaPreset.GEMMA2_LARGE and
    # GEMMA2_XL: num_layers, embed_dim, hidden_dim, num_heads, head_dim, num_kv_heads; the query
    # scaled by 1/sqrt(head_dim), so query_pre_attn_scalar is the head dim). The same file holds
    # the s, b, ml, 2b and 9b stacks above, and agrees with their config.json numbers.
    "l": (1024, 16, 16, 64, 2816, 24, 64),
    "xl": (2048, 32, 32, 64, 5120, 24, 64),
    # Gemma 2 2B: google/gemma-2-2b's config.json as its fine-tunes carry it
    # (https://huggingface.co/kemura/gemma-2b-sql-finetuned/blob/main/config.json), the same as
    # T5Gemma 2B-2B's encoder sub-config in NeuroSenko/ComfyUI_LLM_SDXL_Adapter@a05d0909949acbb16f
    # 29e927fc4af6b3e0bda194, t5gemma_model_loader_s.py (T5Gemma2b_encoder_init).
    "2b": (2304, 8, 4, 256, 9216, 26, 256),
    # Gemma 2 9B: google/gemma-2-9b's config.json as its fine-tunes carry it
    # (https://huggingface.co/ashercn97/blanked-v011/blob/main/config.json; query_pre_attn_scalar
    # 256, not 3584 / 16, as https://huggingface.co/mlx-community/gemma-2-9b-fp16/discussions/2
    # quotes from google/gemma-2-9b).
    "9b": (3584, 16, 8, 256, 14336, 42, 256),
}
# (encoder stack, decoder stack) of each published size.
SIZES = {
    "s_s": ("s", "s"),
    "b_b": ("b", "b"),
    "l_l": ("l", "l"),
    "ml_ml": ("ml", "ml"),
    "xl_xl": ("xl", "xl"),
    "2b_2b": ("2b", "2b"),
    "9b_2b": ("9b", "2b"),
    "9b_9b": ("9b", "9b"),
}


def _alternating_layer_types(num_layers: int) -> tuple[str, ...]:
    """T5Gemma's layer_types: sliding-window attention on odd layers (counting from 1)."""
    return tuple("sliding_attention" if i % 2 == 0 else "full_attention" for i in range(num_layers))


def _widths(stack: str) -> dict:
    hidden, heads, kv_heads, head_dim, mlp, _, _ = _STACKS[stack]
    return dict(
        emb_dim=hidden,
        num_heads=heads,
        num_kv_heads=None if kv_heads == heads else kv_heads,
        head_dim=head_dim,
        mlp_dim=mlp,
    )


def t5gemma_preset_fields(size: str) -> dict:
    """T5Config's fields for the T5Gemma size `size` (a key of SIZES); the decoder's widths,
    the encoder's where they differ in encoder_overrides (the 9b-2b shape)."""
    encoder, decoder = SIZES[size]
    encoder_widths, decoder_widths = _widths(encoder), _widths(decoder)
    encoder_layers, decoder_layers = _STACKS[encoder][5], _STACKS[decoder][5]
    return dict(
        _T5GEMMA,
        **decoder_widths,
        num_encoder_layers=encoder_layers,
        num_decoder_layers=decoder_layers,
        query_pre_attn_scalar=float(_STACKS[decoder][6]),
        encoder_layer_types=_alternating_layer_types(encoder_layers),
        decoder_layer_types=_alternating_layer_types(decoder_layers),
        encoder_overrides=tuple(
            (field, value)
            for field, value in sorted(encoder_widths.items())
            if value != decoder_widths[field]
        ),
    )


T5GEMMA_PRESET_FIELDS: dict[str, dict] = {
    f"t5gemma/{size}": t5gemma_preset_fields(size) for size in SIZES
}
