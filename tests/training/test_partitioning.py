"""Logical-axis rules, meshes and batch checks; sharded training on 8 virtual devices."""

import json
import socket
import subprocess
import textwrap
from pathlib import Path

import jax
import numpy as np
import optax
import pytest
from commands import REPO, command_env, python, python_popen, xla_flags
from jax.sharding import PartitionSpec as P

from t5forge.errors import ConfigError
from t5forge.training import partitioning
from t5forge.training.optimizers import adafactor, adamw
from t5forge.training.train_state import TrainState, train_state_logical_axes

CHECK_SCRIPT = Path(__file__).with_name("multidevice_partitioning_check.py")


@pytest.fixture(scope="module")
def eight_device_report():
    env = command_env(XLA_FLAGS=xla_flags(8), PYTHONPATH=REPO)
    result = python(CHECK_SCRIPT, env=env, timeout=300, check=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("layout", ["data4_model2", "fsdp"])
@pytest.mark.parametrize("optimizer", ["sgd", "adafactor"])
def test_sharded_steps_match_one_device(eight_device_report, layout, optimizer):
    single = eight_device_report["single"][optimizer]["losses"]
    sharded = eight_device_report[layout][optimizer]["losses"]
    np.testing.assert_allclose(sharded, single, rtol=1e-5)
    assert sharded[-1] < sharded[0]
    # in/out shardings are pinned, so three steps compile once
    assert eight_device_report[layout][optimizer]["compilations"] == 1


def test_model_parallel_layout(eight_device_report):
    specs = eight_device_report["data4_model2"]["adafactor"]["specs"]
    assert specs[".params['token_embedder']['embedding']"] == "P('model', None)"
    assert specs[".params['mlp']['wi']['kernel']"] == "P(None, 'model')"
    assert specs[".params['mlp']['wo']['kernel']"] == "P('model', None)"
    assert specs[".params['final_norm']['scale']"] == "P(None,)"
    # factored moments keep the sharding of the dim they keep (v_col keeps 'mlp')
    assert specs[".opt_state.param_states['mlp']['wi']['kernel'].v_col"] == "P('model',)"


def test_fsdp_layout_splits_params_over_data_too(eight_device_report):
    report = eight_device_report["fsdp"]["adafactor"]
    specs, shards = report["specs"], report["shard_shapes"]
    assert specs[".params['token_embedder']['embedding']"] == "P('model', 'data')"
    assert shards[".params['token_embedder']['embedding']"] == [32, 4]  # of [64, 16]
    assert specs[".params['mlp']['wi']['kernel']"] == "P('data', 'model')"
    assert shards[".params['mlp']['wi']['kernel']"] == [4, 16]  # of [16, 32]
    assert specs[".opt_state.param_states['mlp']['wi']['kernel'].v_row"] == "P('data',)"
    assert specs[".opt_state.param_states['final_norm']['scale'].v"] == "P('data',)"


def test_standard_rules_match_t5x():
    rules = dict(partitioning.standard_logical_axis_rules())
    assert rules["batch"] == "data" and rules["vocab"] == "model" and rules["mlp"] == "model"
    assert rules["heads"] == "model" and rules["joined_kv"] == "model"
    for name in ("kv", "embed", "length", "layers", "relpos_buckets"):
        assert rules[name] is None
    assert dict(partitioning.standard_logical_axis_rules(fsdp=True))["embed"] == "data"


def test_overrides_win_and_activations_keep_batch_on_data():
    mesh = partitioning.create_mesh()
    rules = partitioning.standard_logical_axis_rules(fsdp=True, overrides=[("kv", "model")])
    # the override comes first, so 'kv' takes 'model' before 'heads' can
    assert partitioning.logical_to_mesh_spec(("heads", "kv"), mesh, rules) == P(None, "model")
    assert partitioning.logical_to_mesh_spec(("embed", "kv"), mesh, rules) == P("data", "model")
    # 'batch' takes 'data' first, so an activation's 'embed' stays whole
    assert partitioning.logical_to_mesh_spec(("batch", "length", "embed"), mesh, rules) == P(
        "data", None, None
    )


def test_logical_to_mesh_sharding_accepts_tuple_trees():
    mesh = partitioning.create_mesh()
    tree = partitioning.logical_to_mesh_sharding(
        {"kernel": ("embed", "mlp"), "scale": ("embed",)},
        mesh,
        partitioning.standard_logical_axis_rules(),
    )
    assert tree["kernel"].spec == P(None, "model") and tree["kernel"].mesh is mesh


def test_create_mesh_uses_all_devices_and_checks_shapes():
    mesh = partitioning.create_mesh()
    assert mesh.axis_names == ("data", "model")
    assert mesh.devices.size == jax.device_count()
    with pytest.raises(ConfigError, match="mesh_shape=.*needs 6 devices"):
        partitioning.create_mesh(mesh_shape=(3, 2))
    with pytest.raises(ConfigError, match="num_partitions=0"):
        partitioning.create_mesh(num_partitions=0)


def test_batch_divisibility_error_names_both_numbers():
    mesh = partitioning.create_mesh()
    partitioning.check_batch_divisible(7, mesh)  # one data replica: anything goes
    fake_mesh = type("FakeMesh", (), {"shape": {"data": 4, "model": 2}})()
    with pytest.raises(ConfigError, match="global batch size 10 .* data-parallel size 4"):
        partitioning.check_batch_divisible(10, fake_mesh)


def test_shard_batch_builds_global_arrays():
    mesh = partitioning.create_mesh()
    batch = partitioning.shard_batch({"inputs": np.arange(6, dtype=np.int32).reshape(2, 3)}, mesh)
    assert batch["inputs"].shape == (2, 3)
    assert batch["inputs"].sharding.spec == P("data")
    with pytest.raises(ConfigError, match="'step' is a scalar"):
        partitioning.shard_batch({"step": np.int32(3)}, mesh)


def test_initialize_distributed_needs_all_three_flags():
    with pytest.raises(ConfigError, match="coordinator_address, process_count and process_index"):
        partitioning.initialize_distributed("localhost:1234", num_processes=2)
    with pytest.raises(ConfigError, match="process_index 2 is out of range"):
        partitioning.initialize_distributed("localhost:1234", 2, 2)


def test_train_state_axes_follow_params_for_adamw_and_adafactor():
    params = {
        "mlp": {"wi": {"kernel": np.zeros((130, 260), np.float32)}},
        "norm": {"scale": np.zeros((130,), np.float32)},
    }
    axes = {"mlp": {"wi": {"kernel": ("embed", "mlp")}}, "norm": {"scale": ("embed",)}}
    for tx in (
        adamw(1e-3, weight_decay=0.1, global_norm_clip_threshold=1.0),
        optax.MultiSteps(adamw(1e-3), every_k_schedule=2),
    ):
        abstract = jax.eval_shape(lambda tx=tx: TrainState.create(params, tx))
        flat = jax.tree_util.tree_flatten_with_path(train_state_logical_axes(abstract, axes))[0]
        specs = {jax.tree_util.keystr(path): spec for path, spec in flat}
        moments = [s for k, s in specs.items() if k.endswith("['wi']['kernel']") and "opt" in k]
        assert moments and all(s == P("embed", "mlp") for s in moments)
        assert all(s == P() for k, s in specs.items() if "count" in k or k.endswith("step"))
    abstract = jax.eval_shape(lambda: TrainState.create(params, adafactor(0.1)))
    slots = train_state_logical_axes(abstract, axes).opt_state.param_states["mlp"]["wi"]["kernel"]
    assert (slots.v_row, slots.v_col, slots.v, slots.m) == (P("embed"), P("mlp"), P(None), P(None))


TWO_HOST_WORKER = textwrap.dedent("""
    import sys
    import jax
    import numpy as np
    from jax.sharding import NamedSharding, PartitionSpec
    from t5forge.training import partitioning

    port, process = sys.argv[1], int(sys.argv[2])
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    partitioning.initialize_distributed(f"localhost:{port}", 2, process)
    mesh = partitioning.create_mesh()
    local = {"x": np.arange(4, dtype=np.int32).reshape(2, 2) + 100 * process}
    batch = partitioning.shard_batch(local, mesh)
    total = jax.jit(lambda b: b["x"].sum(), out_shardings=NamedSharding(mesh, PartitionSpec()))
    print(jax.device_count(), batch["x"].shape, int(total(batch)))
""")


def test_two_processes_build_one_global_batch():
    """Two real processes (2 CPU devices each) join via initialize_distributed and shard_batch."""
    with socket.socket() as probe:
        probe.bind(("localhost", 0))
        port = probe.getsockname()[1]
    env = command_env(XLA_FLAGS=xla_flags(2), PYTHONPATH=REPO)
    workers = [
        python_popen("-c", TWO_HOST_WORKER, port, i, env=env, stdout=subprocess.PIPE)
        for i in range(2)
    ]
    outputs = [worker.communicate(timeout=120) for worker in workers]
    for worker, (_, stderr) in zip(workers, outputs):
        assert worker.returncode == 0, stderr[-2000:]
    # 4 global devices; rows 0..3 of process 0 plus 100..103 of process 1 sum to 412
    assert [out.strip().splitlines()[-1] for out, _ in outputs] == ["4 (4, 2) 412"] * 2


def test_pjit_partitioner_partitions_and_compiles_over_its_mesh():
    partitioner = partitioning.PjitPartitioner(
        devices=jax.devices()[:1], logical_axis_rules=[("mlp", None)]
    )
    assert partitioner.mesh.shape == {"data": 1, "model": 1}
    assert partitioner.logical_axis_rules[0] == ("mlp", None)  # overrides come first
    weights = partitioner.sharding({"w": ("embed", "mlp")})

    def matmul(params, batch):
        return batch @ params["w"]

    partitioned = partitioner.partition(
        matmul, in_shardings=(weights, "batch"), out_shardings="batch"
    )
    params = {"w": np.ones((3, 2), np.float32)}
    batch = np.arange(12, dtype=np.float32).reshape(4, 3)
    np.testing.assert_allclose(partitioned(params, batch), batch @ params["w"])
    compiled = partitioner.compile(partitioned, params, jax.ShapeDtypeStruct((4, 3), np.float32))
    np.testing.assert_allclose(compiled(params, batch), batch @ params["w"])
    with pytest.raises(ConfigError, match="mesh_shape=\\(2, 1\\) needs 2 devices"):
        _ = partitioning.PjitPartitioner(mesh_shape=(2, 1), devices=jax.devices()[:1]).mesh
