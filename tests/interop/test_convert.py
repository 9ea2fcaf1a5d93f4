"""`t5forge convert` and the T5X -> t5forge -> HF -> t5forge round trip on T5X's real tiny checkpoint."""

import dataclasses

import numpy as np
import pytest
from commands import t5forge_in_process

import t5forge
from t5forge.errors import T5ForgeError
from t5forge.models.presets import get_config


@pytest.fixture(scope="module")
def t5x_checkpoint(shared_data):
    return shared_data / "t5x_testdata" / "test_t5_tiny.checkpoint_0"


def _outputs(model):
    inputs = np.array([[5, 9, 22, 1, 0], [7, 1, 0, 0, 0]])
    decoder = np.array([[0, 4, 8], [0, 3, 0]])
    targets = np.array([[4, 8, 1], [3, 1, 0]])
    return {
        "logits": model.logits(inputs, decoder),
        "scores": model.score(inputs, targets),
        "greedy": np.asarray(model.generate(inputs, max_length=6, method="greedy")),
        "beam": np.asarray(model.generate(inputs, max_length=6, method="beam", num_beams=4)),
    }


def test_t5x_to_t5forge_to_hf_to_t5forge_changes_nothing(t5x_checkpoint, tmp_path, capsys):
    # float32 activations: a Hugging Face config.json does not record T5X's bfloat16 setting.
    config = dataclasses.replace(get_config("t5_1_1/tiny"), dtype="float32")
    gin_file = tmp_path / "tiny_f32.gin"
    gin_file.write_text(
        "\n".join(
            f"T5Config.{f.name} = {getattr(config, f.name)!r}" for f in dataclasses.fields(config)
        )
    )
    original = _outputs(t5forge.load(t5x_checkpoint, config=gin_file))
    ours, hf, back = tmp_path / "ours", tmp_path / "hf", tmp_path / "back"
    assert (
        t5forge_in_process(
            "convert",
            "--from",
            "t5x",
            "--to",
            "t5forge",
            f"--gin_file={gin_file}",
            "--input",
            str(t5x_checkpoint),
            "--output",
            str(ours),
        )
        == 0
    )
    assert "converted 52 tensors (518,240 parameters)" in capsys.readouterr().out
    assert (
        t5forge_in_process(
            "convert",
            "--from",
            "t5forge",
            "--to",
            "hf",
            "--input",
            str(ours),
            "--output",
            str(hf),
        )
        == 0
    )
    assert (
        t5forge_in_process(
            "convert",
            "--from",
            "hf",
            "--to",
            "t5forge",
            "--input",
            str(hf),
            "--output",
            str(back),
        )
        == 0
    )
    for path in (ours, hf, back):
        converted = _outputs(t5forge.load(path))
        for name, value in original.items():
            np.testing.assert_array_equal(converted[name], value, err_msg=f"{name} via {path.name}")


def test_convert_t5x_without_config_infers_it(t5x_checkpoint, tmp_path):
    assert (
        t5forge_in_process(
            "convert",
            "--from",
            "t5x",
            "--to",
            "hf",
            "--input",
            str(t5x_checkpoint),
            "--output",
            str(tmp_path / "hf"),
        )
        == 0
    )
    transformers = pytest.importorskip("transformers")
    model = transformers.T5ForConditionalGeneration.from_pretrained(tmp_path / "hf")
    assert model.config.d_model == 8 and model.config.num_heads == 4


def test_unknown_input_is_one_line(tmp_path, capsys):
    (tmp_path / "junk").write_text("not a checkpoint")
    assert (
        t5forge_in_process(
            "convert",
            "--from",
            "t5x",
            "--to",
            "hf",
            "--input",
            str(tmp_path / "junk"),
            "--output",
            str(tmp_path / "out"),
        )
        == 2
    )
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "\n" not in err
    with pytest.raises(T5ForgeError):
        t5forge.load(tmp_path / "junk")


def test_python_api_converts_and_names_every_tensor(t5x_checkpoint, tmp_path):
    converted = t5forge.convert(
        t5x_checkpoint, tmp_path / "ours", from_="t5x", to="t5forge", config="t5_1_1/tiny"
    )
    tensors = converted.tensors
    assert converted.path == tmp_path / "ours"
    assert len(tensors) == 52 and sum(int(np.prod(s)) for s in tensors.values()) == 518_240
    assert t5forge.load(tmp_path / "ours").config == get_config("t5_1_1/tiny")
    with pytest.raises(T5ForgeError, match="cannot convert from 'onnx'; use one of hf, t5x"):
        t5forge.convert(t5x_checkpoint, tmp_path / "x", from_="onnx", to="hf")


def test_t5forge_to_t5x_keeps_the_step_and_every_output(t5x_checkpoint, tmp_path, capsys):
    """A fine-tuned t5forge checkpoint goes back to T5X: checkpoint_<step> (T5X fine-tuning
    counts TRAIN_STEPS on from it) whose model decodes exactly as the source did."""
    from t5forge.checkpoints.checkpointer import Checkpointer

    source = t5forge.load(t5x_checkpoint, config="t5_1_1/tiny")
    checkpointer = Checkpointer(tmp_path / "run", async_save=False)
    metadata = {"model_config": dataclasses.asdict(source.config)}
    checkpointer.save(1_001_234, {"params": source.params}, metadata=metadata, force=True)
    checkpointer.close()

    argv = ["convert", "--from", "t5forge", "--to", "t5x", "--input", str(tmp_path / "run")]
    assert t5forge_in_process(*argv, "--output", str(tmp_path / "t5x")) == 0
    written = tmp_path / "t5x" / "checkpoint_1001234"
    assert capsys.readouterr().out.strip().endswith(f"to t5x {written}")
    back = _outputs(t5forge.load(written, config="t5_1_1/tiny"))
    for name, value in _outputs(source).items():
        np.testing.assert_array_equal(back[name], value, err_msg=name)

    vocab = ["--vocab", "spiece.model", "--output", str(tmp_path / "other")]
    assert t5forge_in_process(*argv, *vocab) == 2
    err = capsys.readouterr().err.strip()
    assert "carries no vocabulary" in err and "\n" not in err
