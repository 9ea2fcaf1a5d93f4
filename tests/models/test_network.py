"""The T5 network: T5X's parameter tree, relative buckets, cached decoding, packing, dropout."""

import flax.linen
import flax.serialization
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from packed_rows import assert_packed_rows_match_separate

from t5forge.models import param_names
from t5forge.models.attention_layer import MultiHeadAttention
from t5forge.models.layers import MlpBlock, relative_position_bucket
from t5forge.models.model import build_model
from t5forge.models.param_layout import stack_layers, unstack_layers
from t5forge.models.presets import get_config


def _encdec_batch(rng, batch=2, inputs=7, targets=6, vocab=60):
    """Random tokens; the last row (when there are two or more) ends in padding."""
    enc = rng.randint(2, vocab, (batch, inputs)).astype(np.int32)
    tgt = rng.randint(2, vocab, (batch, targets)).astype(np.int32)
    if batch > 1:
        enc[-1, inputs - 2 :] = 0
        tgt[-1, targets - 2 :] = 0
    dec = np.concatenate([np.zeros((batch, 1), np.int32), tgt[:, :-1]], axis=1)
    return {"encoder_input_tokens": enc, "decoder_input_tokens": dec, "decoder_target_tokens": tgt}


@pytest.fixture(scope="module")
def tiny():
    model = build_model(get_config("t5_1_1/tiny", dtype="float32", vocab_size=64))
    return model, model.init_params(jax.random.PRNGKey(0))


def test_param_tree_equals_t5x_test_checkpoint(shared_data):
    raw = (shared_data / "t5x_testdata" / "test_t5_tiny.checkpoint_0").read_bytes()
    t5x_params = flax.serialization.msgpack_restore(raw)["optimizer"]["target"]
    model = build_model(get_config("t5_1_1/tiny"))
    assert param_names.shapes(model.abstract_params()) == param_names.shapes(t5x_params)
    batch = _encdec_batch(np.random.RandomState(0), vocab=32128)
    logits = model.logits(t5x_params, batch)
    assert logits.shape == (2, 6, 32128) and logits.dtype == jnp.float32
    assert np.isfinite(np.asarray(logits)).all()


def test_logical_axes_name_every_param_dimension():
    for scan in (False, True):
        model = build_model(get_config("t5_1_0/tiny", scan_layers=scan))
        shapes = param_names.shapes(model.abstract_params())
        axes = param_names.named_leaves(
            model.param_logical_axes(), is_leaf=lambda x: isinstance(x, tuple)
        )
        assert shapes.keys() == axes.keys()
        assert all(len(axes[k]) == len(shapes[k]) for k in shapes)
        assert axes["token_embedder/embedding"] == ("vocab", "embed")
        layer = "layers" if scan else "layers_0"
        wi = axes[f"encoder/{layer}/mlp/wi/kernel"]
        assert wi == (("embed", "layers", "mlp") if scan else ("embed", "mlp"))


@pytest.mark.parametrize(
    "bidirectional,relative,bucket",
    [
        (True, 0, 0),
        (True, -1, 1),
        (True, 1, 17),
        (True, -7, 7),
        (True, -8, 8),
        (True, -16, 10),
        (True, -200, 15),
        (True, 200, 31),
        (False, 3, 0),
        (False, -15, 15),
        (False, -16, 16),
        (False, -32, 21),
        (False, -100, 30),
        (False, -200, 31),
    ],
)
def test_relative_position_bucket_golden(bidirectional, relative, bucket):
    # relative = key position - query position; values from T5's bucketing formula by hand.
    got = relative_position_bucket(jnp.array(relative), bidirectional, 32, 128)
    assert int(got) == bucket


def _stepwise_logits(model, params, batch, length):
    prompt, cache, tokens_to_logits = model.decoding_state(params, batch, length)
    step_fn = jax.jit(tokens_to_logits)
    tokens, outputs = batch["decoder_input_tokens"], []
    for step in range(length):
        logits, cache = step_fn(jnp.asarray(tokens[:, step : step + 1]), cache, jnp.int32(step))
        outputs.append(logits)
    return np.stack(outputs, axis=1)


def _check_cached_decode(model, params):
    batch = _encdec_batch(np.random.RandomState(1))
    full = np.asarray(model.logits(params, batch))
    stepped = _stepwise_logits(model, params, batch, 6)
    assert stepped.shape == full.shape
    # Padded target positions included: decoding never looks at target padding.
    np.testing.assert_allclose(stepped[0], full[0], atol=1e-5, rtol=0)
    np.testing.assert_allclose(stepped[1, :4], full[1, :4], atol=1e-5, rtol=0)


def test_cached_decode_equals_full_forward(tiny):
    _check_cached_decode(*tiny)


def test_cached_decode_equals_full_forward_scanned_with_per_layer_relpos():
    model = build_model(
        get_config(
            "t5_1_1/tiny",
            dtype="float32",
            vocab_size=64,
            scan_layers=True,
            relative_attention_per_layer=True,
        )
    )
    assert model.abstract_params()["decoder"]["layers"]["relpos_bias"]["rel_embedding"].shape == (
        4,
        2,
        32,
    )
    _check_cached_decode(model, model.init_params(jax.random.PRNGKey(1)))


def test_cached_decode_equals_full_forward_for_prefix_lm():
    model = build_model(get_config("decoder_only/tiny", dtype="float32", vocab_size=64))
    params = model.init_params(jax.random.PRNGKey(2))
    rng = np.random.RandomState(2)
    tgt = rng.randint(2, 64, (2, 8)).astype(np.int32)
    dec = np.concatenate([np.zeros((2, 1), np.int32), tgt[:, :-1]], axis=1)
    # Row 0: 3 prompt tokens (positions 0..3 incl. BOS are the bidirectional prefix); row 1: 1.
    causal = np.zeros((2, 8), np.int32)
    causal[0, :4] = 1
    causal[1, :2] = 1
    batch = {
        "decoder_input_tokens": dec,
        "decoder_target_tokens": tgt,
        "decoder_causal_attention": causal,
    }
    full = np.asarray(model.logits(params, batch))
    stepped = _stepwise_logits(model, params, batch, 8)
    # Logits inside the prompt are never used by decoding; from the last prompt token on they
    # must equal the teacher-forced prefix-LM logits.
    np.testing.assert_allclose(stepped[0, 3:], full[0, 3:], atol=1e-5, rtol=0)
    np.testing.assert_allclose(stepped[1, 1:], full[1, 1:], atol=1e-5, rtol=0)


def test_packed_batch_matches_segments_run_separately(tiny):
    model, params = tiny
    rng = np.random.RandomState(3)
    singles = [_encdec_batch(rng, batch=1, inputs=n, targets=m) for n, m in ((4, 3), (5, 4))]
    assert_packed_rows_match_separate(model, params, singles)


def test_packed_decoder_only_matches_segments():
    model = build_model(get_config("decoder_only/tiny", dtype="float32", vocab_size=64))
    params = model.init_params(jax.random.PRNGKey(4))
    tgt = np.array([[5, 6, 7, 8, 9, 10, 11, 0]], np.int32)
    dec = np.array([[0, 5, 6, 0, 8, 9, 10, 0]], np.int32)
    segments = np.array([[1, 1, 1, 2, 2, 2, 2, 0]], np.int32)
    packed = model.logits(
        params,
        {
            "decoder_input_tokens": dec,
            "decoder_target_tokens": tgt,
            "decoder_segment_ids": segments,
        },
    )
    second = model.logits(
        params, {"decoder_input_tokens": dec[:, 3:7], "decoder_target_tokens": tgt[:, 3:7]}
    )
    np.testing.assert_allclose(np.asarray(packed)[0, 3:7], np.asarray(second)[0], atol=1e-5)


def test_dropout_off_is_deterministic_and_on_is_seeded():
    model = build_model(get_config("t5_1_1/tiny", dtype="float32", vocab_size=64, dropout_rate=0.3))
    params = model.init_params(jax.random.PRNGKey(5))
    batch = _encdec_batch(np.random.RandomState(5))
    np.testing.assert_array_equal(model.logits(params, batch), model.logits(params, batch))
    loss_with_dropout = jax.jit(lambda rng: model.loss_fn(params, batch, rng)[0])
    first = float(loss_with_dropout(jax.random.PRNGKey(0)))
    assert first == float(loss_with_dropout(jax.random.PRNGKey(0)))
    assert first != float(loss_with_dropout(jax.random.PRNGKey(1)))


def test_bfloat16_activations_run_close_to_float32(tiny):
    model32, params = tiny
    model16 = build_model(get_config("t5_1_1/tiny", dtype="bfloat16", vocab_size=64))
    batch = _encdec_batch(np.random.RandomState(6))
    logits16 = np.asarray(model16.logits(params, batch))
    assert logits16.dtype == np.float32 and np.isfinite(logits16).all()
    logits32 = np.asarray(model32.logits(params, batch))
    # bfloat16 keeps ~3 significant digits; errors stay a small fraction of the logit scale.
    np.testing.assert_allclose(logits16, logits32, atol=0.1 * np.abs(logits32).max())


def test_scanned_layout_and_remat_compute_the_same_function(tiny):
    model, params = tiny
    batch = _encdec_batch(np.random.RandomState(7))
    scanned = build_model(
        get_config(
            "t5_1_1/tiny", dtype="float32", vocab_size=64, scan_layers=True, remat_policy="full"
        )
    )
    stacked = stack_layers(params, scanned.config)
    scanned.check_params_match(stacked)
    assert stacked["encoder"]["layers"]["mlp"]["wi_0"]["kernel"].shape == (8, 2, 16)
    np.testing.assert_allclose(
        scanned.logits(stacked, batch), model.logits(params, batch), atol=1e-5
    )
    round_trip = unstack_layers(stacked, scanned.config)
    assert jax.tree_util.tree_all(jax.tree_util.tree_map(np.array_equal, round_trip, params))
    grads = jax.grad(lambda p: scanned.loss_fn(p, batch)[0])(stacked)
    reference = jax.grad(lambda p: model.loss_fn(p, batch)[0])(params)
    np.testing.assert_allclose(
        unstack_layers(grads)["decoder"]["layers_1"]["mlp"]["wo"]["kernel"],
        reference["decoder"]["layers_1"]["mlp"]["wo"]["kernel"],
        atol=1e-4,
    )


def test_fused_projections_compute_the_separate_projections():
    # q/k/v and wi_0/wi_1 run as one matmul over stacked kernels (layers.fused_projections);
    # written out with each kernel on its own, the layers must give the same outputs.
    x = jax.random.normal(jax.random.PRNGKey(0), (2, 5, 8))
    mlp = MlpBlock(8, 16, ("gelu", "linear"))
    p = flax.linen.unbox(mlp.init(jax.random.PRNGKey(1), x)["params"])
    gelu = jax.nn.gelu(x @ p["wi_0"]["kernel"], approximate=True)
    expected = (gelu * (x @ p["wi_1"]["kernel"])) @ p["wo"]["kernel"]
    np.testing.assert_allclose(mlp.apply({"params": p}, x), expected, rtol=1e-5, atol=1e-6)

    attention = MultiHeadAttention(8, num_heads=2, head_dim=4)
    p = flax.linen.unbox(attention.init(jax.random.PRNGKey(2), x, x, None)["params"])
    q, k, v = ((x @ p[name]["kernel"]).reshape(2, 5, 2, 4) for name in ("query", "key", "value"))
    weights = jax.nn.softmax(jnp.einsum("bqhd,bkhd->bhqk", q, k), axis=-1)
    context = jnp.einsum("bhqk,bkhd->bqhd", weights, v).reshape(2, 5, 8)
    np.testing.assert_allclose(
        attention.apply({"params": p}, x, x, None),
        context @ p["out"]["kernel"],
        rtol=1e-5,
        atol=1e-6,
    )
