"""Mixture of experts: placement, T5X's groups and capacities, the routers' rules, the router
losses in the training loss, and the sparse network's paths (scan, dense models untouched).

The routers are checked on hand-made router probabilities whose right answer can be read off;
transformers' Switch parity is tests/interop/test_hf_switch.py.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from t5forge.errors import ConfigError
from t5forge.models import routing
from t5forge.models.model import build_model
from t5forge.models.moe import SparseMlp
from t5forge.models.param_layout import stack_layers
from t5forge.models.param_names import named_leaves
from t5forge.models.presets import PRESETS, get_config
from t5forge.models.sparse_layout import sparse_layer_flags
from t5forge.models.weights_dtype import with_weights_dtype

BATCH = {
    "encoder_input_tokens": np.array([[3, 4, 5, 6, 1, 0], [7, 8, 1, 0, 0, 0]], np.int32),
    "decoder_input_tokens": np.array([[0, 9, 10, 11], [0, 12, 13, 0]], np.int32),
    "decoder_target_tokens": np.array([[9, 10, 11, 1], [12, 13, 1, 0]], np.int32),
}


def _sparse(**fields):
    base = dict(
        vocab_size=32,
        num_experts=4,
        num_sparse_encoder_layers=1,
        num_sparse_decoder_layers=1,
        dtype="float32",
        num_selected_experts=2,
    )
    return get_config("t5_1_1/tiny", **{**base, **fields})


def _where(flags):
    return [i for i, sparse in enumerate(flags) if sparse]


def test_every_preset_stays_dense():
    assert not any(config.is_sparse for config in PRESETS.values())
    params = build_model(PRESETS["t5_1_1/tiny"]).abstract_params()
    assert not [name for name in named_leaves(params) if "expert" in name or "router" in name]


@pytest.mark.parametrize(
    "layout, expected",
    [
        ("mixed", [2, 5]),  # Flaxformer: l % 3 == 2
        ("top", [4, 5]),
        ("bottom", [0, 1]),
        ("middle", [2, 3]),
        ("huggingface", [1, 4]),  # transformers: i % 3 == 1
    ],
)
def test_sparse_layouts_place_two_of_six(layout, expected):
    assert _where(sparse_layer_flags(6, 2, layout)) == expected


def test_mixed_layout_needs_a_divisor():
    with pytest.raises(ConfigError, match="must divide the stack's 8 layers"):
        get_config("t5_1_1/small", num_experts=8, num_sparse_encoder_layers=3)
    with pytest.raises(ConfigError, match="has only 8 layers"):
        get_config("t5_1_1/small", num_experts=8, num_sparse_decoder_layers=9)


def test_groups_and_capacity_follow_t5x():
    # 8192 tokens in groups of at most 4096, 8 experts: at least 8 groups of 1024.
    assert routing.num_groups(8192, 4096, 8) == 8
    # 5000 tokens, 8 experts: 8 groups of 625 (T5X's floor-then-divide rule).
    assert routing.num_groups(5000, 4096, 8) == 8
    # One decoding step of 6 rows, 8 experts: no multiple of 8 divides 6, so one group.
    assert routing.num_groups(6, 4096, 8) == 1
    assert routing.capacity_from_factor(1024, 8, 1.25, 4) == 160
    assert routing.capacity_from_factor(6, 8, 1.0, 4) == 4


def _probs(rows):
    return jnp.asarray([rows], jnp.float32)  # one group


def _slots(dispatch):
    """{expert: [token in each filled slot]} of group 0."""
    dispatch = np.asarray(dispatch[0])
    return {
        e: [
            int(np.argmax(dispatch[:, e, c]))
            for c in range(dispatch.shape[2])
            if dispatch[:, e, c].any()
        ]
        for e in range(dispatch.shape[1])
    }


# Four tokens that all prefer expert 0, with rising confidence.
CROWDED = [[0.6, 0.4], [0.7, 0.3], [0.8, 0.2], [0.9, 0.1]]


def test_top1_fills_experts_in_token_order_and_drops_the_rest():
    dispatch, combine, _ = routing.tokens_choose(_probs(CROWDED), 1, 2, batch_prioritized=False)
    assert _slots(dispatch) == {0: [0, 1], 1: []}
    np.testing.assert_allclose(np.asarray(combine[0]).sum(axis=(1, 2)), [0.6, 0.7, 0.0, 0.0])


def test_batch_prioritized_routing_keeps_the_most_confident():
    dispatch, _, _ = routing.tokens_choose(_probs(CROWDED), 1, 2, batch_prioritized=True)
    assert _slots(dispatch) == {0: [3, 2], 1: []}


def test_top2_second_choices_queue_after_all_first_choices():
    probs = [[0.5, 0.3, 0.2], [0.1, 0.6, 0.3], [0.2, 0.5, 0.3]]
    dispatch, combine, chosen = routing.tokens_choose(_probs(probs), 2, 2, batch_prioritized=False)
    np.testing.assert_array_equal(chosen[0], [[0, 1], [1, 2], [1, 2]])
    # Expert 1: first choices of tokens 1 and 2 fill it; token 0's second choice is dropped.
    assert _slots(dispatch) == {0: [0], 1: [1, 2], 2: [1, 2]}
    # Combine weights are the router probabilities themselves (T5X does not renormalise).
    np.testing.assert_allclose(np.asarray(combine[0]).sum(axis=(1, 2)), [0.5, 0.9, 0.8])


def test_experts_choose_their_most_probable_tokens():
    dispatch, combine = routing.experts_choose(_probs(CROWDED), 2)
    assert _slots(dispatch) == {0: [3, 2], 1: [0, 1]}
    np.testing.assert_allclose(np.asarray(combine[0]).sum(axis=(1, 2)), [0.4, 0.3, 0.8, 0.9])


def test_balanced_routing_has_unit_auxiliary_loss():
    probs = jnp.full((2, 8, 4), 0.25)
    chosen = jnp.tile(jnp.arange(4), 4).reshape(2, 8, 1)
    assert float(routing.load_balancing_loss(*routing.load_balance_terms(probs, chosen))) == 1.0


def test_router_losses_join_the_training_loss():
    config = _sparse(aux_loss_factor=0.5, router_z_loss_factor=0.25)
    model = build_model(config)
    params = model.init_params(jax.random.PRNGKey(0))
    plain = build_model(dataclasses.replace(config, aux_loss_factor=0.0, router_z_loss_factor=0.0))
    loss, metrics = jax.jit(model.loss_fn)(params, BATCH)
    plain_loss, plain_metrics = jax.jit(plain.loss_fn)(params, BATCH)
    router = metrics["experts/auxiliary_loss"] + metrics["experts/router_z_loss"]
    assert float(router) > 0 and float(plain_metrics["experts/auxiliary_loss"]) == 0.0
    np.testing.assert_allclose(loss, plain_loss + router, rtol=1e-6)
    assert metrics["loss"] == loss and metrics["cross_ent_loss"] == plain_metrics["cross_ent_loss"]
    for name in ("fraction_tokens_left_behind", "expert_usage", "router_confidence"):
        assert 0.0 <= float(metrics[f"experts/{name}"]) <= 1.0


def test_capacity_factor_differs_between_training_and_evaluation():
    """A tiny train capacity factor drops tokens while training; evaluation keeps them."""
    config = _sparse(train_capacity_factor=0.1, eval_capacity_factor=4.0, min_expert_capacity=1)
    model = build_model(config)
    params = model.init_params(jax.random.PRNGKey(0))
    _, training = jax.jit(model.loss_fn)(params, BATCH, jax.random.PRNGKey(1))
    _, evaluation = jax.jit(model.loss_fn)(params, BATCH)
    assert float(training["experts/fraction_tokens_left_behind"]) > 0.0
    assert float(evaluation["experts/fraction_tokens_left_behind"]) == 0.0


@pytest.mark.slow
def test_scanned_sparse_stacks_compute_what_unrolled_ones_do():
    config = _sparse(
        num_sparse_encoder_layers=2,
        num_sparse_decoder_layers=2,
        encoder_router="experts_choose",
        encoder_batch_prioritized_routing=True,
        sparse_extra_mlp=True,
        aux_loss_factor=0.1,
        router_z_loss_factor=0.1,
    )
    scanned = dataclasses.replace(config, scan_layers=True)
    params = build_model(config).init_params(jax.random.PRNGKey(0))
    loss, metrics = jax.jit(build_model(config).loss_fn)(params, BATCH)
    scanned_loss, scanned_metrics = jax.jit(build_model(scanned).loss_fn)(
        stack_layers(params, scanned), BATCH
    )
    np.testing.assert_allclose(scanned_loss, loss, rtol=1e-5)
    for name, value in metrics.items():
        np.testing.assert_allclose(scanned_metrics[name], value, rtol=1e-5, atol=1e-7)
    kernel = named_leaves(stack_layers(params, scanned))["encoder/layers/mlp/expert/wo/kernel"]
    assert kernel.shape == (4, 2, 16, 8)  # [experts, layers, mlp, emb]


@pytest.mark.slow
def test_cached_decoding_routes_as_the_teacher_forced_pass():
    """With one group per sequence and room for every token, a decoding step routes its token
    as the whole-sequence pass does: greedy tokens are the teacher-forced argmaxes."""
    model = build_model(_sparse(routing_groups="sequence", expert_capacity=8))
    params = model.init_params(jax.random.PRNGKey(0))
    encoder = BATCH["encoder_input_tokens"]
    tokens = np.asarray(
        model.predict_batch(params, {"encoder_input_tokens": encoder}, max_decode_length=5)
    )
    prefix = np.zeros((2, 5), np.int32)
    for step in range(5):
        features = {
            "encoder_input_tokens": encoder,
            "decoder_input_tokens": prefix,
            "decoder_target_tokens": np.ones_like(prefix),
        }
        best = np.argmax(np.asarray(model.logits(params, features))[:, step], axis=-1)
        if step + 1 < 5:
            prefix[:, step + 1] = best
        after_eos = (tokens[:, :step] == 1).any(axis=1)
        np.testing.assert_array_equal(tokens[~after_eos, step], best[~after_eos])


def test_refusals_name_the_field():
    with pytest.raises(ConfigError, match="decoder_router='experts_choose'"):
        _sparse(decoder_router="experts_choose")
    with pytest.raises(ConfigError, match="fixed expert_capacity"):
        _sparse(routing_groups="sequence")
    with pytest.raises(ConfigError, match="mixes sparse and dense MLPs"):
        get_config("t5_1_1/tiny", num_experts=2, num_sparse_encoder_layers=1, scan_layers=True)
    with pytest.raises(ConfigError, match="num_selected_experts \\(3\\) cannot exceed"):
        _sparse(num_experts=2, num_selected_experts=3)


def test_bfloat16_weights_keep_the_router_in_float32():
    abstract = build_model(_sparse()).abstract_params()
    params = jax.tree.map(lambda leaf: np.zeros(leaf.shape, leaf.dtype), abstract)
    dtypes = {
        name: str(leaf.dtype)
        for name, leaf in named_leaves(with_weights_dtype(params, "bfloat16")).items()
    }
    assert dtypes["encoder/layers_1/mlp/router/router_weights/w/kernel"] == "float32"
    assert dtypes["encoder/layers_1/mlp/expert/wo/kernel"] == "bfloat16"


def test_jitter_noise_moves_only_training_routing():
    layer = SparseMlp(_sparse(router_jitter_noise=0.5, dropout_rate=0.0), name="mlp")
    x = jax.random.normal(jax.random.PRNGKey(0), (2, 6, 8))
    params = layer.init(jax.random.PRNGKey(1), x)

    def z_loss(deterministic, seed):
        _, state = layer.apply(
            params,
            x,
            deterministic,
            rngs={"dropout": jax.random.PRNGKey(seed)},
            mutable=["intermediates"],
        )
        return float(state["intermediates"]["router_z_loss"][0])

    assert z_loss(True, 2) == z_loss(True, 3)
    assert z_loss(False, 2) != z_loss(False, 3)
