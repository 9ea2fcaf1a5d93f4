"""Writing T5X checkpoints, checked against the files T5X itself wrote (t5x/testdata): the same
specs, the same parameter tree, chunks that hold the raw array bytes T5X's reader expects."""

import gzip
import os

import msgpack
import numpy as np
import pytest

from t5forge.errors import CheckpointError
from t5forge.interop import t5x
from t5forge.interop.t5x_writer import array_spec, chunk_shape, save_t5x_checkpoint
from t5forge.models.param_names import named_leaves


@pytest.fixture(scope="module")
def testdata(shared_data):
    return shared_data / "t5x_testdata"


@pytest.fixture(scope="module")
def tiny(testdata):
    return t5x.load_t5x_checkpoint(testdata / "test_t5_tiny.checkpoint_0")[0]


def _unpack(file):
    return msgpack.unpackb(file.read_bytes(), raw=False, strict_map_key=False)


def _key_tree(tree):
    """The names of a state tree, down to its leaves (arrays, or the specs standing for them)."""
    if isinstance(tree, dict) and "driver" not in tree:
        return {k: _key_tree(v) for k, v in tree.items()}
    return None


@pytest.mark.parametrize(
    "shape, itemsize, expected",
    [
        ((5,), 4, [5]),  # everything under 64 MiB is one chunk
        ((), 4, []),
        ((32128, 8), 4, [32128, 8]),
        ((1024, 65536), 4, [1024, 16384]),  # the largest dimension shrinks, by divisors
        ((8192, 8192), 4, [4096, 4096]),  # a tie shrinks the first, then the other
        ((32128, 4096), 4, [4016, 4096]),  # 32128 = 2^7 * 251: its divisors, not halvings
        ((32128, 4096), 2, [8032, 4096]),  # bfloat16 chunks hold twice the elements
    ],
)
def test_chunks_follow_t5x_rule(shape, itemsize, expected):
    assert chunk_shape(shape, itemsize) == expected


def test_specs_are_the_ones_t5x_recorded(testdata):
    """T5X's own tiny_t5 checkpoint records one spec per array; ours for the same names,
    shapes and dtypes are identical but for the kvstore driver, 'file' since T5X dropped
    the 'gfile' driver that old checkpoint names."""
    recorded = _unpack(testdata / "tiny_t5" / "checkpoint_1" / "checkpoint")
    specs = recorded["optimizer"]["state"]["param_states"]
    assert specs.keys() == {"bias", "kernel", "step"}
    for name, spec in specs.items():
        expected = {**spec, "kvstore": {**spec["kvstore"], "driver": "file"}}
        shape, dtype = tuple(spec["metadata"]["shape"]), np.dtype(spec["dtype"])
        assert array_spec(f"state.param_states.{name}", shape, dtype) == expected


def test_the_real_tiny_t5_is_written_as_t5x_lays_it_out(testdata, tiny, tmp_path):
    written = save_t5x_checkpoint(tiny, tmp_path / "model", step=1_000_000)
    assert written == tmp_path / "model" / "checkpoint_1000000"
    assert os.listdir(tmp_path / "model") == ["checkpoint_1000000"]

    ours = _unpack(written / "checkpoint")
    theirs = _unpack(testdata / "test_t5_tiny.checkpoint_0")
    assert ours["version"] == theirs["version"] == 3
    assert _key_tree(ours["optimizer"]["target"]) == _key_tree(theirs["optimizer"]["target"])
    step = ours["optimizer"]["state"]["step"]  # flax's numpy scalar extension, as T5X writes it
    assert step.code == 3 and np.frombuffer(msgpack.unpackb(step.data)[2], np.int32) == 1_000_000

    for name, array in named_leaves(tiny).items():
        directory = written / f"target.{name.replace('/', '.')}"
        (chunk,) = [p for p in directory.iterdir() if p.name != ".zarray"]
        raw = gzip.decompress(chunk.read_bytes())  # C-order little-endian bytes, gzip'ed
        assert raw == np.ascontiguousarray(array, "<f4").tobytes(), name

    params, step, _ = t5x.load_t5x_checkpoint(tmp_path / "model")
    assert step == 1_000_000 and t5x.detect_format(written) == t5x.FORMAT_TENSORSTORE
    for name, array in named_leaves(tiny).items():
        np.testing.assert_array_equal(named_leaves(params)[name], array, err_msg=name)


def test_nothing_half_written_is_taken_for_a_checkpoint(tiny, tmp_path):
    save_t5x_checkpoint(tiny, tmp_path, step=5)
    with pytest.raises(CheckpointError, match="checkpoint_5 already exists"):
        save_t5x_checkpoint(tiny, tmp_path, step=5)
    broken = {**tiny, "decoder": {**tiny["decoder"], "broken": {"kernel": "not an array"}}}
    with pytest.raises(ValueError):
        save_t5x_checkpoint(broken, tmp_path, step=6)
    assert not (tmp_path / "checkpoint_6").exists()
    assert t5x.load_t5x_checkpoint(tmp_path)[1] == 5  # the half-written one is not listed


def test_a_scanned_model_is_written_stacked(tiny, tmp_path):
    """A scan_layers model's layers go out stacked (layer axis 1), as T5X's scanned models
    hold them, and read back layer by layer."""
    import dataclasses

    from t5forge.models.param_layout import stack_layers
    from t5forge.models.presets import get_config

    config = dataclasses.replace(get_config("t5_1_1/tiny"), scan_layers=True)
    written = save_t5x_checkpoint(stack_layers(tiny, config), tmp_path)
    assert (written / "target.encoder.layers.attention.query.kernel").is_dir()
    assert not (written / "target.encoder.layers_0.attention.query.kernel").exists()
    params = t5x.load_t5x_checkpoint(tmp_path)[0]
    for name, array in named_leaves(tiny).items():
        np.testing.assert_array_equal(named_leaves(params)[name], array, err_msg=name)


def test_arrays_over_the_chunk_size_are_split_and_read_back(tiny, tmp_path, monkeypatch):
    """T5X splits arrays over 64 MiB into chunks; at a 16 KiB limit the tiny model's embedding
    ([32128, 8] float32, 1 MiB) takes that path."""
    from t5forge.interop import t5x_writer

    monkeypatch.setattr(t5x_writer, "_CHUNK_BYTES", 16 * 1024)
    written = save_t5x_checkpoint(tiny, tmp_path)
    spec = _unpack(written / "checkpoint")["optimizer"]["target"]["token_embedder"]["embedding"]
    assert spec["metadata"]["chunks"] == chunk_shape((32128, 8), 4) == [502, 8]
    chunks = list((written / "target.token_embedder.embedding").glob("*.0"))
    assert len(chunks) == 32128 // 502
    params = t5x.load_t5x_checkpoint(tmp_path)[0]
    np.testing.assert_array_equal(
        params["token_embedder"]["embedding"], tiny["token_embedder"]["embedding"]
    )
