"""Expert parallelism on one device: T5X's expert mesh arithmetic, the 'expert' rules,
Adafactor's factored slots on the expert axis, and MoeTrainer's gradient scaling."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from t5forge.errors import ConfigError
from t5forge.models.model import build_model
from t5forge.models.presets import get_config
from t5forge.training import partitioning
from t5forge.training.moe_trainer import MoeTrainer
from t5forge.training.optimizers import adafactor, factor_plan
from t5forge.training.train_state import TrainState, train_state_logical_axes

EXPERT_KERNEL = ("expert", "embed", "expert_mlp")


@pytest.mark.parametrize(
    ("data_size", "asked", "expected"),
    [(8, 4, 4), (8, 8, 8), (6, 4, 3), (8, 3, 2), (2, 8, 2), (1, 4, 1), (7, 4, 1)],
)
def test_expert_axis_is_the_largest_divisor_of_data_up_to_the_partitions(
    data_size, asked, expected
):
    assert partitioning.expert_axis_size(data_size, asked) == expected


def test_expert_partitions_below_one_are_refused():
    with pytest.raises(ConfigError, match="num_expert_partitions=0 must be >= 1"):
        partitioning.MoePjitPartitioner(num_expert_partitions=0)


def test_one_device_expert_mesh_has_the_three_axes():
    partitioner = partitioning.MoePjitPartitioner(4, devices=jax.devices()[:1])
    assert partitioner.mesh.axis_names == ("data", "expert", "model")
    assert partitioner.mesh.devices.shape == (1, 1, 1)
    assert partitioning.batch_sharding(partitioner.mesh).spec == P(("expert", "data"))


def test_expert_rules_split_experts_and_the_batch_over_the_expert_axis():
    rules = partitioning.standard_logical_axis_rules(expert_parallel=True)
    mesh = partitioning.MoePjitPartitioner(4, devices=jax.devices()[:1]).mesh
    assert partitioning.logical_to_mesh_spec(EXPERT_KERNEL, mesh, rules) == P(
        "expert", None, "model"
    )
    assert partitioning.logical_to_mesh_spec(("batch", "length"), mesh, rules) == P(
        ("expert", "data"), None
    )
    router = ("embed", "unmodeled")
    assert partitioning.logical_to_mesh_spec(router, mesh, rules) == P(None, None)
    fsdp = partitioning.standard_logical_axis_rules(fsdp=True, expert_parallel=True)
    assert partitioning.logical_to_mesh_spec(EXPERT_KERNEL, mesh, fsdp) == P(
        "expert", "data", "model"
    )


def test_without_an_expert_mesh_experts_are_replicated():
    rules = partitioning.standard_logical_axis_rules()
    mesh = partitioning.create_mesh(devices=jax.devices()[:1])
    assert partitioning.logical_to_mesh_spec(EXPERT_KERNEL, mesh, rules) == P(None, None, "model")
    assert partitioning.batch_sharding(mesh).spec == P("data")


def test_adafactor_factors_each_expert_and_its_slots_keep_the_expert_axis():
    """T5X contrib/moe's factor rules: 'expert' is a batch dim, so each expert has its own
    row/column moments and parameter scale, and the slots carry 'expert' to the mesh."""
    plan = factor_plan((4, 16, 32), EXPERT_KERNEL)
    assert (plan.averaging, plan.row_reduced, plan.col_reduced) == ((1, 2), (1,), (2,))
    params = {"expert": {"wi": {"kernel": jnp.ones((4, 16, 32))}}}
    axes = {"expert": {"wi": {"kernel": EXPERT_KERNEL}}}
    tx = adafactor(0.1, param_logical_axes=axes)
    abstract = jax.eval_shape(lambda: TrainState.create(params, tx))
    slots = train_state_logical_axes(abstract, axes).opt_state.param_states["expert"]["wi"]
    assert slots["kernel"].v_row == P("expert", "embed")
    assert slots["kernel"].v_col == P("expert", "expert_mlp")
    # a gradient confined to one expert moves only that expert
    grads = {"expert": {"wi": {"kernel": jnp.zeros((4, 16, 32)).at[2].set(1.0)}}}
    updates, _ = tx.update(grads, tx.init(params), params)
    moved = np.abs(np.asarray(updates["expert"]["wi"]["kernel"])).sum(axis=(1, 2))
    assert moved[2] > 0 and moved[[0, 1, 3]].max() < 1e-6 * moved[2]


def test_moe_trainer_scales_expert_gradients_by_the_expert_partitions():
    model = build_model(get_config("t5_1_1/tiny", dtype="float32"))
    partitioner = partitioning.MoePjitPartitioner(4, devices=jax.devices()[:1])
    trainer = MoeTrainer(model, adafactor(0.1), partitioner, num_expert_partitions=4)
    grads = {
        "encoder": {
            "layers_1": {
                "mlp": {
                    "expert": {"wi": {"kernel": jnp.ones((4, 2, 3))}},
                    "router": {"router_weights": {"w": jnp.ones((2, 4))}},
                }
            }
        }
    }
    scaled = trainer.scale_expert_grads(grads)["encoder"]["layers_1"]["mlp"]
    np.testing.assert_array_equal(scaled["expert"]["wi"]["kernel"], 4.0)
    np.testing.assert_array_equal(scaled["router"]["router_weights"]["w"], 1.0)
    unscaled = MoeTrainer(
        model, adafactor(0.1), partitioner, num_expert_partitions=4, expert_params=None
    )
    assert unscaled.scale_expert_grads(grads) is grads
    with pytest.raises(ConfigError, match="num_expert_partitions must be >= 1"):
        MoeTrainer(model, adafactor(0.1), partitioner, num_expert_partitions=0)


def test_moe_trainer_refuses_more_expert_partitions_than_experts():
    model = build_model(get_config("t5_1_1/tiny", dtype="float32", num_experts=2))
    partitioner = partitioning.MoePjitPartitioner(4, devices=jax.devices()[:1])
    with pytest.raises(ConfigError, match="NUM_EXPERT_PARTITIONS=4 exceeds the model's 2"):
        MoeTrainer(model, adafactor(0.1), partitioner, num_expert_partitions=4)
