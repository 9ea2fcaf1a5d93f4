"""T5Config.scale_attn_logits (T5X's GPU network): attention logits times head_dim**-0.5.

T5 never scales them (its query initializer carries the factor), so the default must leave
every network exactly as it was; the flag must scale q k^T on the full, prefill and cached
paths alike, and a scaled network must not pass as a Hugging Face T5 (which cannot scale).
"""

from __future__ import annotations

import dataclasses

import flax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from t5forge.errors import ConfigError
from t5forge.interop.huggingface import load_hf_dir, save_hf_dir
from t5forge.models.attention_layer import MultiHeadAttention
from t5forge.models.model import build_model
from t5forge.models.presets import get_config

HEADS, HEAD_DIM, EMB = 2, 4, 8


def _explicit_attention(p, x, scale):
    """softmax(q k^T * scale) v, projected, written out in float32."""
    q, k, v = (
        (x @ p[n]["kernel"]).reshape(2, 5, HEADS, HEAD_DIM) for n in ("query", "key", "value")
    )
    weights = jax.nn.softmax(jnp.einsum("bqhd,bkhd->bhqk", q, k) * scale, axis=-1)
    return jnp.einsum("bhqk,bkhd->bqhd", weights, v).reshape(2, 5, EMB) @ p["out"]["kernel"]


@pytest.fixture(scope="module")
def inputs():
    x = jax.random.normal(jax.random.PRNGKey(0), (2, 5, EMB), jnp.float32)
    plain = MultiHeadAttention(EMB, HEADS, HEAD_DIM)
    params = flax.linen.unbox(plain.init(jax.random.PRNGKey(1), x, x, None)["params"])
    return x, params


@pytest.mark.parametrize("scaled", [False, True])
def test_the_flag_scales_the_logits_by_head_dim(inputs, scaled):
    x, p = inputs
    attention = MultiHeadAttention(EMB, HEADS, HEAD_DIM, scale_logits=scaled)
    expected = _explicit_attention(p, x, HEAD_DIM**-0.5 if scaled else 1.0)
    got = attention.apply({"params": p}, x, x, None)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    # Cross-attention of one query over a cached memory (decoding) scales the same way.
    cache = attention.apply({"params": p}, x, method="fill_cache", mutable=["cache"])[1]
    step = attention.apply({"params": p, **cache}, x[:, :1], None, method="decode_step")
    np.testing.assert_allclose(step, attention.apply({"params": p}, x[:, :1], x, None), atol=1e-6)


def test_the_default_network_is_unchanged_bitwise():
    config = get_config(  # one layer a stack: the cheapest network with every attention kind
        "t5_1_1/tiny", dtype="float32", vocab_size=16, num_encoder_layers=1, num_decoder_layers=1
    )
    assert config.scale_attn_logits is False
    batch = {
        "encoder_input_tokens": np.arange(2, 16, dtype=np.int32).reshape(2, 7),
        "decoder_input_tokens": np.arange(0, 12, dtype=np.int32).reshape(2, 6),
        "decoder_target_tokens": np.arange(1, 13, dtype=np.int32).reshape(2, 6),
    }
    model = build_model(config)
    params = model.init_params(jax.random.PRNGKey(0))
    default = np.asarray(model.logits(params, batch))
    scaled = build_model(dataclasses.replace(config, scale_attn_logits=True)).logits(params, batch)
    assert not np.allclose(default, scaled)  # the flag reaches every attention layer
    plain = MultiHeadAttention(EMB, HEADS, HEAD_DIM)  # no flag given: the unscaled layer
    x = jnp.ones((2, 5, EMB))
    p = flax.linen.unbox(plain.init(jax.random.PRNGKey(1), x, x, None)["params"])
    explicit_off = MultiHeadAttention(EMB, HEADS, HEAD_DIM, scale_logits=False)
    assert np.array_equal(
        plain.apply({"params": p}, x, x, None), explicit_off.apply({"params": p}, x, x, None)
    )


def test_hugging_face_export_and_import_refuse_a_scaled_network(tmp_path):
    config = get_config("t5_1_1/tiny", scale_attn_logits=True)
    for refused_call in (
        lambda: save_hf_dir({}, config, tmp_path / "export"),
        lambda: load_hf_dir(tmp_path / "hf", config=config),
    ):
        with pytest.raises(ConfigError, match="scale_attn_logits") as refused:
            refused_call()
        assert "\n" not in str(refused.value)
    assert not (tmp_path / "export").exists()  # refused before anything is written
