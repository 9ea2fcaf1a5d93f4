"""Parity with Hugging Face `transformers` T5Gemma 2 (PyTorch, eager attention), both directions.

Tiny random-weight T5Gemma 2 models whose every switch runs: QK-norm, RoPE bases that differ
between sliding (50) and full (1000) layers, a 4-key encoder window split around the query and
a 4-key causal decoder window, the decoder's merged attention (its own and the encoder's
positions in one softmax), fewer key/value heads than query heads, the end-of-image token's own
embedding (id 13, present in the inputs), a final soft-cap of 3.0, padding and odd lengths.
The vision tower is a one-layer SigLIP that t5forge leaves unread, as it does a real one.
"""

import jax
import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import t5forge  # noqa: E402
from t5forge.interop import hf_t5gemma2  # noqa: E402
from t5forge.interop import huggingface as hf  # noqa: E402
from t5forge.models.model import build_model  # noqa: E402
from tests.interop.test_hf_t5gemma import (  # noqa: E402
    ENCODER_INPUTS,
    TARGETS,
    _assert_close_where_valid,
    _decoder_inputs,
    _hf_logits,
    assert_beams_match_up_to_t5x_rules,
)
from tests.interop.test_huggingface import _hf_generate  # noqa: E402

SLIDING, FULL = "sliding_attention", "full_attention"
EOI = 13
VISION = dict(
    model_type="siglip_vision_model",
    hidden_size=8,
    intermediate_size=16,
    num_hidden_layers=1,
    num_attention_heads=2,
    image_size=28,
    patch_size=14,
)


def _stack(layer_types: list[str], kv_heads: int, linear_factor: float | None = None) -> dict:
    """A Gemma 3 stack; `linear_factor` scales the full layers' RoPE as the published
    checkpoints do (rope_type 'linear', factor 8)."""
    full = {"rope_type": "default", "rope_theta": 1000.0}
    if linear_factor is not None:
        full = {"rope_type": "linear", "factor": linear_factor, "rope_theta": 1000.0}
    return dict(
        vocab_size=16,
        hidden_size=12,
        intermediate_size=20,
        num_hidden_layers=len(layer_types),
        num_attention_heads=4,
        num_key_value_heads=kv_heads,
        head_dim=6,
        query_pre_attn_scalar=5,
        sliding_window=4,
        layer_types=layer_types,
        final_logit_softcapping=3.0,
        rope_parameters={
            FULL: full,
            SLIDING: {"rope_type": "default", "rope_theta": 50.0},
        },
    )


# (encoder text stack, decoder stack, tie_word_embeddings, seed)
LAYOUTS = {
    "tied": (_stack([SLIDING, FULL, SLIDING], 2), _stack([SLIDING, FULL], 2), True, 0),
    "untied": (_stack([FULL, SLIDING], 1, 8.0), _stack([SLIDING, SLIDING, FULL], 1, 8.0), False, 1),
}


def _random_hf_model(layout: str):
    text, decoder, tied, seed = LAYOUTS[layout]
    config = transformers.T5Gemma2Config(
        encoder=dict(
            text_config=text, vision_config=VISION, mm_tokens_per_image=4, eoi_token_index=EOI
        ),
        decoder=decoder,
        eoi_token_index=EOI,
        tie_word_embeddings=tied,
    )
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = transformers.T5Gemma2ForConditionalGeneration(config).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0.0, 0.5)  # norms and the end-of-image vector start at zero
    return model


@pytest.fixture(scope="module", params=list(LAYOUTS))
def converted(request, tmp_path_factory):
    """(layout, HF model, t5forge Model loaded from the directory the HF model saved)."""
    model = _random_hf_model(request.param)
    path = tmp_path_factory.mktemp(request.param)
    model.save_pretrained(path)
    return request.param, model, t5forge.load(path)


def test_config_reads_every_switch(converted):
    layout, _, forge = converted
    config = forge.config
    assert config.merged_attention and config.qk_norm and config.encoder_window == "split"
    assert (config.rope_theta, config.rope_local_theta) == (1000.0, 50.0)
    assert config.rope_linear_factor == (None if layout == "tied" else 8.0)
    assert config.eoi_token_id == EOI
    # Tied: one embedding for both stacks and the head; untied: each its own.
    assert config.logits_via_embedding == LAYOUTS[layout][2] != config.separate_embeddings
    assert hf_t5gemma2.config_from_hf(hf_t5gemma2.config_to_hf(config)) == config


def test_imported_logits_match_transformers(converted):
    _, model, forge = converted
    assert (ENCODER_INPUTS == EOI).any()
    decoder_inputs = _decoder_inputs(TARGETS)
    expected = _hf_logits(model, ENCODER_INPUTS, decoder_inputs)
    _assert_close_where_valid(forge.logits(ENCODER_INPUTS, decoder_inputs), expected)


def test_both_spellings_of_the_encoder_keys_load(converted):
    """transformers' older names (`encoder.layers.*`, no `text_model.`) give the same params."""
    _, model, forge = converted
    state_dict = {name: tensor.numpy() for name, tensor in model.state_dict().items()}
    older = {name.replace("encoder.text_model.", "encoder."): v for name, v in state_dict.items()}
    params = hf_t5gemma2.params_from_hf_state_dict(older, forge.config)
    for leaf, expected in zip(jax.tree.leaves(params), jax.tree.leaves(forge.params), strict=True):
        np.testing.assert_array_equal(leaf, expected)


def test_export_read_back_by_transformers(converted, tmp_path):
    """Fresh t5forge weights, exported, give transformers t5forge's logits."""
    _, _, forge = converted
    params = jax.device_get(build_model(forge.config).init_params(jax.random.PRNGKey(7)))
    hf.save_hf_dir(params, forge.config, tmp_path)
    exported = transformers.T5Gemma2ForConditionalGeneration.from_pretrained(
        tmp_path, attn_implementation="eager"
    ).eval()
    again = t5forge.load(tmp_path)
    decoder_inputs = _decoder_inputs(TARGETS)
    expected = _hf_logits(exported, ENCODER_INPUTS, decoder_inputs)
    _assert_close_where_valid(again.logits(ENCODER_INPUTS, decoder_inputs), expected)


def test_greedy_matches_transformers_generate(converted):
    _, model, forge = converted
    expected = _hf_generate(model, ENCODER_INPUTS, 11, num_beams=1)
    np.testing.assert_array_equal(forge.generate(ENCODER_INPUTS, max_length=11), expected)


def test_beam_search_matches_transformers_generate(converted):
    _, model, forge = converted
    assert_beams_match_up_to_t5x_rules(model, forge)
