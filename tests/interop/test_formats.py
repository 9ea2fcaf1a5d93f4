"""One list decides which checkpoint format a path holds, for load, runs and convert alike."""

import dataclasses

import jax
import numpy as np
import pytest
from commands import t5forge_in_process

import t5forge
from t5forge.checkpoints import formats
from t5forge.checkpoints.checkpointer import Checkpointer
from t5forge.checkpoints.step_dir import read_metadata
from t5forge.errors import CheckpointError, ConfigError
from t5forge.models.model import build_model
from t5forge.models.presets import get_config
from t5forge.run import setup


@pytest.fixture(scope="module")
def t5x_checkpoint(shared_data):
    return shared_data / "t5x_testdata" / "test_t5_tiny.checkpoint_0"


@pytest.fixture(scope="module")
def config():
    return dataclasses.replace(get_config("t5_1_1/tiny"), dtype="float32")


def _t5forge_dir(path, config, metadata) -> None:
    params = jax.tree.map(np.asarray, build_model(config).init_params(jax.random.PRNGKey(0)))
    checkpointer = Checkpointer(path, async_save=False)
    checkpointer.save(0, {"params": params}, metadata=metadata, force=True)
    checkpointer.close()


def test_each_format_is_told_apart(tmp_path, t5x_checkpoint, config):
    _t5forge_dir(tmp_path / "ours", config, {})
    mesh = tmp_path / "mesh"
    mesh.mkdir()
    (mesh / "model.ckpt-1000.index").write_bytes(b"")
    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "config.json").write_text("{}")
    (tmp_path / "notes.txt").write_text("not a checkpoint")
    assert formats.detect_format(hf) == formats.HF
    assert formats.detect_format(tmp_path / "ours") == formats.T5FORGE
    assert formats.detect_format(tmp_path / "ours" / "checkpoint_0") == formats.T5FORGE
    assert formats.detect_format(t5x_checkpoint) == formats.T5X
    assert formats.detect_format(mesh) == formats.MESH_TF
    assert formats.detect_format(tmp_path / "notes.txt") is None
    refusal = str(formats.unrecognised(tmp_path))
    assert all(fmt.description in refusal for fmt in formats.FORMATS)


def test_params_come_in_the_config_layout(t5x_checkpoint, config):
    per_layer, step = formats.read_params(t5x_checkpoint, formats.T5X)
    assert "layers_0" in per_layer["encoder"] and step == 0
    scanned, _ = formats.read_params(
        t5x_checkpoint, formats.T5X, dataclasses.replace(config, scan_layers=True)
    )
    assert "layers" in scanned["encoder"] and "layers_0" not in scanned["encoder"]
    with pytest.raises(ValueError, match="not 't5forge'"):
        formats.read_params(t5x_checkpoint, formats.T5FORGE)


def test_a_scanned_run_starts_from_a_t5x_checkpoint(t5x_checkpoint, config):
    model = build_model(dataclasses.replace(config, scan_layers=True))
    params, message = setup.load_params(str(t5x_checkpoint), model)
    model.check_params_match(params)
    assert message.startswith("loaded every parameter")


def test_mesh_tf_checkpoints_load_through_the_same_list(tmp_path):
    (tmp_path / "model.ckpt-5.index").write_bytes(b"")
    with pytest.raises(ConfigError, match="Mesh TF checkpoint .* does not record its model"):
        t5forge.load(tmp_path)
    with pytest.raises(CheckpointError, match="needs TensorFlow"):
        t5forge.load(tmp_path, config="t5_1_1/tiny")


def test_convert_refuses_a_source_format_the_input_is_not(t5x_checkpoint, tmp_path, capsys):
    assert (
        t5forge_in_process(
            "convert",
            "--from",
            "hf",
            "--to",
            "t5forge",
            "--input",
            str(t5x_checkpoint),
            "--output",
            str(tmp_path / "out"),
        )
        == 2
    )
    assert "is a t5x checkpoint, not hf; pass --from t5x" in capsys.readouterr().err


def test_metadata_reads_back_without_orbax(tmp_path, config):
    _t5forge_dir(tmp_path, config, {"model_config": dataclasses.asdict(config)})
    assert read_metadata(tmp_path / "checkpoint_0")["model_config"]["emb_dim"] == config.emb_dim
    assert t5forge.load(tmp_path).config == config
    (tmp_path / "checkpoint_0" / "metadata" / "metadata").write_text("{truncated")
    with pytest.raises(CheckpointError, match="cannot read .*metadata.*is damaged"):
        read_metadata(tmp_path / "checkpoint_0")
