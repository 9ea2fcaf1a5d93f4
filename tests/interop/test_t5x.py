"""T5X checkpoint import: the shipped T5X test checkpoints plus checkpoints written here with
the real writers (flax msgpack, TensorStore zarr, Orbax), per-layer and scanned."""

import gzip
import shutil

import jax
import msgpack
import numpy as np
import orbax.checkpoint as ocp
import pytest
import tensorstore as ts
from flax import serialization

from t5forge.errors import CheckpointError
from t5forge.interop import t5x
from t5forge.models.param_names import named_leaves


@pytest.fixture(scope="module")
def testdata(shared_data):
    return shared_data / "t5x_testdata"


@pytest.fixture(scope="module")
def tiny(testdata):
    """(params, opt_state) of the shipped tiny T5 1.1, the source for every written format."""
    params, step, opt_state = t5x.load_t5x_checkpoint(
        testdata / "test_t5_tiny.checkpoint_0", with_optimizer_state=True
    )
    assert step == 0
    return params, opt_state


def _assert_trees_equal(actual, expected):
    actual, expected = named_leaves(actual), named_leaves(expected)
    assert actual.keys() == expected.keys()
    for name, value in expected.items():
        assert actual[name].dtype == np.float32, name
        np.testing.assert_array_equal(actual[name], value, err_msg=name)


def _random_like(tree, seed):
    rng = np.random.default_rng(seed)
    return jax.tree.map(lambda x: rng.standard_normal(x.shape).astype(np.float32), tree)


# ------------------------------------------------------------------ single-file msgpack


def test_single_file_msgpack_reads_the_tiny_t5(testdata, tiny):
    params, opt_state = tiny
    leaves = named_leaves(params)
    assert t5x.detect_format(testdata / "test_t5_tiny.checkpoint_0") == t5x.FORMAT_MSGPACK
    assert len(leaves) == 52
    assert sum(x.size for x in leaves.values()) == 518_240
    assert leaves["token_embedder/embedding"].shape == (32128, 8)
    assert leaves["decoder/logits_dense/kernel"].shape == (8, 32128)
    assert leaves["encoder/relpos_bias/rel_embedding"].shape == (4, 32)
    assert leaves["encoder/layers_1/attention/query/kernel"].shape == (8, 12)
    assert leaves["decoder/layers_0/encoder_decoder_attention/out/kernel"].shape == (12, 8)
    assert leaves["decoder/layers_1/mlp/wi_1/kernel"].shape == (8, 16)
    scales = [v for k, v in leaves.items() if k.endswith("/scale")]
    assert len(scales) == 2 * 2 + 2 * 3 + 2
    assert all(np.all(s == 1.0) for s in scales)
    slots = opt_state["param_states"]["decoder"]["logits_dense"]["kernel"]
    assert slots["v"].shape == (8, 32128) and slots["v_row"].shape == (1,)
    assert opt_state["step"] == 0


def test_infer_config_of_the_tiny_t5(tiny):
    config = t5x.infer_config(tiny[0])
    assert (config.vocab_size, config.emb_dim, config.num_heads, config.head_dim) == (
        32128,
        8,
        4,
        3,
    )
    assert (config.num_encoder_layers, config.num_decoder_layers, config.mlp_dim) == (2, 2, 16)
    assert config.mlp_activations == ("gelu", "linear") and not config.logits_via_embedding


# ------------------------------------------------------------------ shipped format examples


def _chunk(directory, name):
    return gzip.decompress((directory / name).read_bytes())


def test_legacy_tensorstore_example_without_zarray_headers(testdata):
    directory = testdata / "tiny_t5" / "checkpoint_1"
    assert t5x.detect_format(testdata / "tiny_t5") == t5x.FORMAT_TENSORSTORE
    state = t5x.read_t5x_state(directory)
    slots = state["state"]["param_states"]
    kernel = np.frombuffer(_chunk(directory, "state.param_states.kernel/0.0"), "<f8")
    np.testing.assert_array_equal(slots["kernel"], kernel.reshape(10, 5))
    assert slots["kernel"].dtype == np.float64
    np.testing.assert_array_equal(slots["bias"], np.ones(5, np.float32))
    assert int(slots["step"]) == 1
    params, step, opt_state = t5x.load_t5x_checkpoint(directory, with_optimizer_state=True)
    assert params == {} and step == 1 and opt_state["step"] == 1


def test_orbax_placeholder_example_with_hints(testdata):
    legacy = t5x.read_t5x_state(testdata / "tiny_t5" / "checkpoint_1")["state"]
    hints = {f"_optimizer.state.param_states.{k}": v for k, v in legacy["param_states"].items()}
    hints["_optimizer.state.step"] = legacy["step"]
    assert t5x.detect_format(testdata / "tiny_orbax" / "1") == t5x.FORMAT_ORBAX_MSGPACK
    state = t5x.read_t5x_state(testdata / "tiny_orbax" / "1", array_hints=hints)
    for name in ("bias", "kernel", "step"):
        np.testing.assert_array_equal(
            state["state"]["param_states"][name], legacy["param_states"][name]
        )
    assert int(state["state"]["step"]) == 1
    with pytest.raises(
        CheckpointError,
        match=r"_optimizer.state.param_states.bias has no "
        r"\.zarray header.*array_hints=",
    ):
        t5x.read_t5x_state(testdata / "tiny_orbax" / "1")


# ------------------------------------------------------------------ written with real writers


def _write_tensorstore_checkpoint(directory, params, opt_state):
    """T5X's native layout: big arrays as gzip zarr dirs named by dotted path, specs inline."""
    directory.mkdir(parents=True)
    state = {
        "target": params,
        "state": {"step": np.int32(opt_state["step"]), "param_states": opt_state["param_states"]},
    }

    def to_spec(path, leaf):
        if leaf.ndim < 2:  # small arrays stay inline in the msgpack, as T5X does
            return leaf
        name = ".".join(str(k.key) for k in path)
        chunks = [max(1, leaf.shape[0] // 4), *leaf.shape[1:]]  # several chunks along axis 0
        spec = {
            "driver": "zarr",
            "dtype": "float32",
            "kvstore": {"driver": "gfile", "path": name},
            "metadata": {
                "shape": list(leaf.shape),
                "chunks": chunks,
                "compressor": {"id": "gzip", "level": 1},
            },
        }
        store = ts.open(
            {**spec, "kvstore": {"driver": "file", "path": str(directory / name)}}, create=True
        ).result()
        store.write(leaf).result()
        return spec

    tree = jax.tree_util.tree_map_with_path(to_spec, state)
    data = serialization.msgpack_serialize({"version": 3, "optimizer": tree})
    (directory / "checkpoint").write_bytes(data)


@pytest.fixture(scope="module")
def tensorstore_dir(tiny, tmp_path_factory):
    directory = tmp_path_factory.mktemp("t5x_native") / "checkpoint_7"
    _write_tensorstore_checkpoint(directory, tiny[0], {**tiny[1], "step": 7})
    return directory


def test_tensorstore_checkpoint_round_trips(tensorstore_dir, tiny):
    assert t5x.detect_format(tensorstore_dir.parent) == t5x.FORMAT_TENSORSTORE
    params, step, opt_state = t5x.load_t5x_checkpoint(tensorstore_dir, with_optimizer_state=True)
    assert step == 7
    _assert_trees_equal(params, tiny[0])
    _assert_trees_equal(opt_state["param_states"], tiny[1]["param_states"])
    assert t5x.load_t5x_checkpoint(tensorstore_dir)[2] is None


def test_tensorstore_checkpoint_without_zarray_headers(tensorstore_dir, tiny, tmp_path):
    copy = tmp_path / "checkpoint_7"
    shutil.copytree(tensorstore_dir, copy)
    removed = list(copy.glob("*/.zarray"))
    assert len(removed) > 30
    for header in removed:
        header.unlink()
    params, _, _ = t5x.load_t5x_checkpoint(copy)
    _assert_trees_equal(params, tiny[0])


def _t5x_orbax_state(params, opt_state):
    return {
        "_optimizer": {
            "target": params,
            "state": {
                "step": np.int32(opt_state["step"]),
                "param_states": opt_state["param_states"],
            },
        }
    }


def test_orbax_checkpoint_with_metadata(tiny, tmp_path):
    directory = tmp_path / "checkpoint_3"
    ocp.PyTreeCheckpointer().save(directory, _t5x_orbax_state(tiny[0], {**tiny[1], "step": 3}))
    assert t5x.detect_format(tmp_path) == t5x.FORMAT_ORBAX
    params, step, opt_state = t5x.load_t5x_checkpoint(directory, with_optimizer_state=True)
    assert step == 3
    _assert_trees_equal(params, tiny[0])
    _assert_trees_equal(opt_state["param_states"], tiny[1]["param_states"])


def test_orbax_zarr_dirs_behind_placeholder_msgpack(tiny, tmp_path):
    """The T5X-era Orbax layout: zstd zarr dirs plus a msgpack of PLACEHOLDER:// names."""
    directory = tmp_path / "1"
    params = {"encoder": tiny[0]["encoder"]}
    state = _t5x_orbax_state(params, {"step": 5, "param_states": {}})
    handler = ocp.PyTreeCheckpointHandler(use_ocdbt=False)
    ocp.Checkpointer(handler).save(directory, args=ocp.args.PyTreeSave(state))
    (directory / "_METADATA").unlink()
    names = jax.tree_util.tree_map_with_path(
        lambda path, _: "PLACEHOLDER://" + ".".join(str(k.key) for k in path), state
    )
    (directory / "checkpoint").write_bytes(msgpack.packb(names))
    assert t5x.detect_format(directory) == t5x.FORMAT_ORBAX_MSGPACK
    loaded, step, _ = t5x.load_t5x_checkpoint(directory)
    assert step == 5
    _assert_trees_equal(loaded, params)


# ------------------------------------------------------------------ scanned layout


def _stack_layers(stack, num_layers):
    """T5X scan_layers layout: one `layers` subtree, the layer axis at position 1."""
    layers = [stack[f"layers_{i}"] for i in range(num_layers)]
    scanned = {k: v for k, v in stack.items() if not k.startswith("layers_")}
    scanned["layers"] = jax.tree.map(lambda *xs: np.stack(xs, axis=1), *layers)
    return scanned


def _factored_slots(params, seed):
    """Adafactor slots as T5X factors 2-D kernels: v_row drops the column, v_col the row."""
    rng = np.random.default_rng(seed)

    def slots(x):
        unused = np.zeros((1,), np.float32)
        if x.ndim == 2:
            return {
                "v_row": rng.random(x.shape[0], np.float32),
                "v_col": rng.random(x.shape[1], np.float32),
                "v": unused,
                "m": unused,
            }
        return {"v_row": unused, "v_col": unused, "v": rng.random(x.shape, np.float32), "m": unused}

    return jax.tree.map(slots, params)


def _stack_slot_layers(stack, num_layers):
    """Scanned slots: v_col of a [row, L, col] kernel is [L, col]; unused slots stay (1,)."""

    def stack_slot(name, *per_layer):
        if per_layer[0].shape == (1,):
            return per_layer[0]
        return np.stack(per_layer, axis=0 if name == "v_col" else 1)

    layers = [stack[f"layers_{i}"] for i in range(num_layers)]
    scanned = {k: v for k, v in stack.items() if not k.startswith("layers_")}
    scanned["layers"] = jax.tree_util.tree_map_with_path(
        lambda path, *xs: stack_slot(path[-1].key, *xs), *layers
    )
    return scanned


def test_scanned_msgpack_checkpoint_is_unstacked(tiny, tmp_path):
    params = _random_like(tiny[0], seed=0)
    slots = _factored_slots(params, seed=1)
    scanned = {
        **params,
        "encoder": _stack_layers(params["encoder"], 2),
        "decoder": _stack_layers(params["decoder"], 2),
    }
    scanned_slots = {
        **slots,
        "encoder": _stack_slot_layers(slots["encoder"], 2),
        "decoder": _stack_slot_layers(slots["decoder"], 2),
    }
    assert scanned["encoder"]["layers"]["mlp"]["wi_0"]["kernel"].shape == (8, 2, 16)
    assert scanned_slots["encoder"]["layers"]["mlp"]["wi_0"]["kernel"]["v_col"].shape == (2, 16)
    file = tmp_path / "scanned.checkpoint"
    file.write_bytes(
        serialization.msgpack_serialize(
            {
                "version": 3,
                "optimizer": {
                    "target": scanned,
                    "state": {"step": 11, "param_states": scanned_slots},
                },
            }
        )
    )
    assert t5x.infer_config(scanned).num_encoder_layers == 2
    loaded, step, opt_state = t5x.load_t5x_checkpoint(file, with_optimizer_state=True)
    assert step == 11
    _assert_trees_equal(loaded, params)
    _assert_trees_equal(opt_state["param_states"], slots)


# ------------------------------------------------------------------ errors


def test_not_a_checkpoint_lists_the_formats_tried(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    for path in (tmp_path, tmp_path / "notes.txt"):
        assert not t5x.is_t5x_checkpoint(path)
        with pytest.raises(
            CheckpointError,
            match="is not a T5X checkpoint; tried t5x_msgpack.*t5x_tensorstore.*orbax",
        ):
            t5x.detect_format(path)
    with pytest.raises(CheckpointError, match="does not exist"):
        t5x.load_t5x_checkpoint(tmp_path / "missing")
    (tmp_path / "other.msgpack").write_bytes(msgpack.packb({"weights": [1, 2]}))
    with pytest.raises(CheckpointError, match="other.msgpack is msgpack without T5X state keys"):
        t5x.load_t5x_checkpoint(tmp_path / "other.msgpack")


def test_truncated_msgpack_names_the_file(testdata, tmp_path):
    broken = tmp_path / "checkpoint_0"
    broken.write_bytes((testdata / "test_t5_tiny.checkpoint_0").read_bytes()[:100_000])
    assert t5x.is_t5x_checkpoint(broken)  # so that loading reports the damage, not "unknown"
    with pytest.raises(CheckpointError) as error:
        t5x.load_t5x_checkpoint(broken)
    message = str(error.value)
    assert "\n" not in message and str(broken) in message and "truncated or corrupt" in message


def test_corrupt_zarr_chunk_names_the_array(tensorstore_dir, tmp_path):
    copy = tmp_path / "checkpoint_7"
    shutil.copytree(tensorstore_dir, copy)
    array_dir = copy / "target.token_embedder.embedding"
    (array_dir / "0.0").write_bytes(b"\x1f\x8b garbage")
    with pytest.raises(
        CheckpointError,
        match=r"target\.token_embedder\.embedding is truncated "
        r"or corrupt",
    ):
        t5x.load_t5x_checkpoint(copy)
