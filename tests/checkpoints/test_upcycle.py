"""Sparse upcycling: a dense t5forge checkpoint, written by the real Checkpointer, restored into
a real sparse model's parameters (T5X's UpcycleCheckpointer)."""

import dataclasses

import jax
import numpy as np
import pytest

from t5forge.checkpoints.checkpointer import Checkpointer
from t5forge.checkpoints.upcycle import UpcycleCheckpointer
from t5forge.errors import CheckpointError, ConfigError
from t5forge.interop.huggingface import save_hf_dir
from t5forge.models.model import build_model
from t5forge.models.presets import get_config
from t5forge.training.optimizers import adafactor
from t5forge.training.train_state import TrainState

NUM_EXPERTS = 4
DENSE = get_config("t5_1_1/tiny", dtype="float32")
# Layer 1 of each stack sparse ('mixed'), top-1 routing, and a capacity factor of NUM_EXPERTS:
# every expert has a slot for every token of its group, so no token is dropped.
SPARSE = get_config(
    "t5_1_1/tiny",
    dtype="float32",
    num_experts=NUM_EXPERTS,
    num_sparse_encoder_layers=1,
    num_sparse_decoder_layers=1,
    num_selected_experts=1,
    train_capacity_factor=float(NUM_EXPERTS),
    eval_capacity_factor=float(NUM_EXPERTS),
)
ROUTER = "mlp/router/router_weights/w/kernel"


@pytest.fixture(scope="module")
def dense(tmp_path_factory):
    """The dense model, its parameters and the model dir the real Checkpointer saved them in."""
    model = build_model(DENSE)
    params = model.init_params(jax.random.PRNGKey(0))
    model_dir = tmp_path_factory.mktemp("dense")
    Checkpointer(model_dir, period=1, async_save=False).save(
        1, TrainState.create(params, adafactor(0.1))
    )
    return model, params, model_dir


@pytest.fixture(scope="module")
def upcycled(dense):
    _, _, model_dir = dense
    sparse = build_model(SPARSE)
    fresh = sparse.init_params(jax.random.PRNGKey(1))
    params, report = UpcycleCheckpointer(NUM_EXPERTS).restore_params(model_dir, fresh)
    return sparse, fresh, params, report


def test_every_expert_is_its_layer_dense_mlp_and_the_routers_stay_fresh(dense, upcycled):
    _, dense_params, _ = dense
    _, fresh, params, report = upcycled
    for stack in ("encoder", "decoder"):
        dense_mlp = dense_params[stack]["layers_1"]["mlp"]
        sparse_mlp = params[stack]["layers_1"]["mlp"]
        for name, weights in dense_mlp.items():
            kernel = np.asarray(sparse_mlp["expert"][name]["kernel"])
            assert kernel.shape == (NUM_EXPERTS, *weights["kernel"].shape)
            for expert in range(NUM_EXPERTS):
                np.testing.assert_array_equal(kernel[expert], weights["kernel"])
        np.testing.assert_array_equal(
            sparse_mlp["router"]["router_weights"]["w"]["kernel"],
            fresh[stack]["layers_1"]["mlp"]["router"]["router_weights"]["w"]["kernel"],
        )
        np.testing.assert_array_equal(
            params[stack]["layers_0"]["mlp"]["wi_0"]["kernel"],
            dense_params[stack]["layers_0"]["mlp"]["wi_0"]["kernel"],
        )
    assert sorted(report.fresh) == [f"decoder/layers_1/{ROUTER}", f"encoder/layers_1/{ROUTER}"]


def test_top1_upcycled_model_gives_the_dense_logits(dense, upcycled):
    """T5X (and Hugging Face) scale a top-1 expert's output by its router probability, so the
    sparse layer is the dense MLP where that probability is 1: routers scaled up until it
    rounds to 1 in float32 for every token (any expert will do, all are the dense MLP)."""
    dense_model, dense_params, _ = dense
    sparse, _, params, _ = upcycled
    saturated = jax.tree.map(lambda x: x, params)  # new dicts: the fixture's stay as they are
    for stack in ("encoder", "decoder"):
        router = saturated[stack]["layers_1"]["mlp"]["router"]["router_weights"]["w"]
        router["kernel"] = router["kernel"] * 1e6
    rng = np.random.default_rng(0)
    batch = {
        "encoder_input_tokens": rng.integers(2, DENSE.vocab_size, (2, 12), dtype=np.int32),
        "decoder_target_tokens": rng.integers(2, DENSE.vocab_size, (2, 6), dtype=np.int32),
    }
    batch["decoder_input_tokens"] = np.pad(batch["decoder_target_tokens"][:, :-1], ((0, 0), (1, 0)))
    expected = np.asarray(dense_model.logits(dense_params, batch))
    np.testing.assert_allclose(np.asarray(sparse.logits(saturated, batch)), expected, atol=1e-5)
    # with the fresh routers' probabilities (about 1/NUM_EXPERTS) they differ
    fresh_routers = np.asarray(sparse.logits(params, batch))
    assert np.abs(fresh_routers - expected).max() > 1e-2


def test_wrong_number_of_experts_is_named(dense):
    _, _, model_dir = dense
    fresh = build_model(SPARSE).abstract_params()
    with pytest.raises(ConfigError, match="not 8 experts first; set UpcycleCheckpointer"):
        UpcycleCheckpointer(8).restore_params(model_dir, fresh)


def test_experts_wider_than_the_dense_mlp_are_refused(dense):
    _, _, model_dir = dense
    wide = build_model(dataclasses.replace(SPARSE, expert_mlp_dim=2 * DENSE.mlp_dim))
    fresh = wide.abstract_params()
    with pytest.raises(CheckpointError, match="expert/wi_0/kernel"):
        UpcycleCheckpointer(NUM_EXPERTS).restore_params(model_dir, fresh)


def test_experts_the_map_keeps_fresh_are_left_as_given(dense, upcycled):
    _, _, model_dir = dense
    fresh = upcycled[1]
    keep_everything_fresh = ((r".*", None),)
    params, report = UpcycleCheckpointer(NUM_EXPERTS).restore_params(
        model_dir, fresh, keep_everything_fresh
    )
    assert not report.restored
    jax.tree.map(np.testing.assert_array_equal, params, fresh)


def test_a_hugging_face_dense_checkpoint_is_sent_to_convert_first(dense, tmp_path):
    _, dense_params, _ = dense
    save_hf_dir(dense_params, DENSE, tmp_path / "hf")
    with pytest.raises(CheckpointError, match="convert it first .t5forge convert --from hf"):
        UpcycleCheckpointer(NUM_EXPERTS).restore_params(
            tmp_path / "hf", build_model(SPARSE).abstract_params()
        )
