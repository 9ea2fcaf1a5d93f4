"""LongT5's encoder attention (models/long_attention.py) on the paths t5forge runs.

Parity of the numbers with transformers is tests/interop/test_hf_longt5.py; here the network
agrees with itself where it computes one thing two ways: the blocked local attention and a
full attention masked to the same window (T5Gemma's symmetric sliding window), packed and
separate sequences, scanned and per-layer stacks, remat and not. Blocks of 3 (local_radius=2)
and global blocks of 2 over odd, padded inputs make every edge run; the refusals are one line
each.
"""

import dataclasses

import jax
import numpy as np
import pytest
from packed_rows import assert_packed_rows_match_separate

from t5forge.errors import ConfigError
from t5forge.models.configs import SLIDING_ATTENTION
from t5forge.models.long_attention import global_blocks
from t5forge.models.model import build_model
from t5forge.models.param_layout import stack_layers
from t5forge.models.presets import get_config


def _long(encoder_attention: str, **overrides):
    fields = dict(vocab_size=40, dtype="float32", local_radius=2, global_block_size=2)
    return get_config("t5_1_1/tiny", encoder_attention=encoder_attention, **{**fields, **overrides})


def _batch(rng, inputs: int, targets: int, padding: int = 0) -> dict:
    encoder = rng.randint(3, 40, (1, inputs)).astype(np.int32)
    encoder = np.pad(encoder, ((0, 0), (0, padding)))
    target = rng.randint(3, 40, (1, targets)).astype(np.int32)
    decoder = np.concatenate([np.zeros((1, 1), np.int32), target[:, :-1]], axis=1)
    return {
        "encoder_input_tokens": encoder,
        "decoder_input_tokens": decoder,
        "decoder_target_tokens": target,
    }


def _init(config, seed: int = 0):
    model = build_model(config)
    return model, jax.device_get(model.init_params(jax.random.PRNGKey(seed)))


def test_global_blocks_adopt_orphans_and_skip_padding():
    valid = np.arange(11)[None, :] < np.array([[6], [3], [11], [1]])
    block_ids, segments = global_blocks(valid, 2)
    expected = [
        [0, 0, 1, 1, 2, 2, -1, -1, -1, -1, -1],
        [0, 0, 0, -1, -1, -1, -1, -1, -1, -1, -1],  # position 2 is an orphan of block 0
        [0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 4],
        [-1] * 11,  # shorter than one block: no global token at all
    ]
    np.testing.assert_array_equal(block_ids, expected)
    np.testing.assert_array_equal(
        segments, [[1, 1, 1, 0, 0], [1, 0, 0, 0, 0], [1, 1, 1, 1, 1], [0, 0, 0, 0, 0]]
    )


def test_packed_sequences_count_global_blocks_from_their_own_start():
    segment_ids = np.array([[1, 1, 1, 2, 2, 2, 2, 2, 3, 4, 4, 0]])
    block_ids, segments = global_blocks(segment_ids > 0, 2, segment_ids)
    np.testing.assert_array_equal(block_ids, [[0, 0, 0, 1, 1, 2, 2, 2, -1, 3, 3, -1]])
    np.testing.assert_array_equal(segments, [[1, 2, 2, 4, 0, 0]])


def test_local_attention_is_full_attention_inside_the_radius():
    """Blocks of radius + 1 over a 3-block window see exactly the keys |q - k| <= radius."""
    model, params = _init(_long("local"))
    windowed = build_model(
        _long("full", encoder_layer_types=(SLIDING_ATTENTION,) * 2, sliding_window=2)
    )
    batch = _batch(np.random.RandomState(0), 7, 5, padding=3)
    np.testing.assert_allclose(
        model.logits(params, batch), windowed.logits(params, batch), atol=1e-5
    )


def test_transient_global_params_have_flaxformer_names():
    encoder = build_model(_long("transient_global")).abstract_params()["encoder"]
    assert encoder["side_relpos_bias"]["rel_embedding"].shape == (4, 32)
    assert encoder["layers_1"]["attention"]["T5LayerNorm_0"]["scale"].shape == (8,)
    local, full = (build_model(_long(kind)).abstract_params() for kind in ("local", "full"))
    assert jax.tree.structure(local) == jax.tree.structure(full)  # T5's tensors exactly


@pytest.mark.parametrize("kind", ["local", "transient_global"])
def test_packed_batch_matches_segments_run_separately(kind):
    """Windows and global tokens stay inside each packed sequence."""
    model, params = _init(_long(kind))
    rng = np.random.RandomState(3)
    singles = [_batch(rng, n, m) for n, m in ((5, 3), (7, 6))]
    assert_packed_rows_match_separate(model, params, singles)


@pytest.mark.parametrize("kind", ["local", "transient_global"])
def test_scanned_stack_computes_the_per_layer_one(kind):
    config = _long(kind)
    model, params = _init(config, seed=1)
    scanned_config = dataclasses.replace(config, scan_layers=True)
    batch = _batch(np.random.RandomState(1), 7, 5, padding=2)
    np.testing.assert_allclose(
        build_model(scanned_config).logits(stack_layers(params, scanned_config), batch),
        model.logits(params, batch),
        atol=1e-5,
    )


@pytest.mark.slow
def test_remat_and_dropout_train_the_transient_global_encoder():
    """Gradients reach every long-attention weight, with remat equal to without."""
    config = _long("transient_global", dropout_rate=0.1)
    _, params = _init(config, seed=2)
    batch = _batch(np.random.RandomState(2), 7, 5, padding=2)

    def gradients(config):
        model = build_model(config)
        return jax.grad(lambda p: model.loss_fn(p, batch, jax.random.PRNGKey(5))[0])(params)

    plain = gradients(config)
    remat = gradients(dataclasses.replace(config, remat_policy="full"))
    for a, b in zip(jax.tree.leaves(plain), jax.tree.leaves(remat), strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5)
    encoder = plain["encoder"]
    for grad in (encoder["side_relpos_bias"], encoder["layers_0"]["attention"]["T5LayerNorm_0"]):
        assert np.all(np.isfinite(jax.tree.leaves(grad)[0]))
        assert np.any(jax.tree.leaves(grad)[0] != 0)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(encoder_attention="sparse"), "encoder_attention must be one of"),
        (dict(encoder_attention="local", local_radius=0), "local_radius must be a positive"),
        (dict(global_block_size=True), "global_block_size must be a positive"),
        (dict(encoder_attention="local", rope_theta=10.0, head_dim=4), "unset rope_theta"),
        (
            dict(encoder_attention="transient_global", relative_attention_per_layer=True),
            "unset relative_attention_per_layer",
        ),
    ],
)
def test_bad_long_attention_configs_are_one_line(overrides, message):
    with pytest.raises(ConfigError, match=message) as error:
        get_config("t5_1_1/tiny", **overrides)
    assert "\n" not in str(error.value)
