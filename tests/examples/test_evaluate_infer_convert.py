"""examples/evaluate_infer_convert, run as its README says, on a tiny en->de checkpoint.

`t5forge eval`, `t5forge infer` (predict and score), the TensorBoard event files a run
leaves, and `t5forge convert --to hf` whose model generates in transformers exactly the
tokens t5forge's greedy decoding gives.
"""

import json

import numpy as np
import pytest
from event_files import read_event_scalars

TASK = "en_de_lohelp_translate"
pytestmark = pytest.mark.slow


def _jsonl(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory, tiny_model_gin, tiny_vocab, run_t5forge):
    """A tiny en->de model trained 6 steps with examples/finetune_en_de/finetune.gin."""
    model_dir = tmp_path_factory.mktemp("evaluate_infer_convert") / "run"
    run_t5forge(
        "train",
        "--gin_file=examples/finetune_en_de/finetune.gin",
        f"--gin_file={tiny_model_gin}",
        f"--gin.MODEL_DIR={model_dir}",
        "--gin.INITIAL_CHECKPOINT_PATH=None",
        "--gin.TRAIN_STEPS=6",
        "--gin.BATCH_SIZE=8",
        "--gin.EVAL_PERIOD=3",
        "--gin.CHECKPOINT_PERIOD=6",
        "--gin.train.stats_period=3",
        "--gin.train.infer_eval_dataset_cfg=None",
        env={"T5FORGE_VOCAB": str(tiny_vocab)},
    )
    return model_dir


@pytest.fixture(scope="module")
def run_on_checkpoint(tiny_model_gin, tiny_vocab, run_t5forge):
    """`t5forge eval|infer --gin_file=runs/<command>.gin en_de.gin tiny.gin CHECKPOINT FLAGS`."""

    def run(command, checkpoint_path, *flags):
        return run_t5forge(
            command,
            f"--gin_file=runs/{command}.gin",
            "--gin_file=examples/evaluate_infer_convert/en_de.gin",
            f"--gin_file={tiny_model_gin}",
            f"--gin.CHECKPOINT_PATH={checkpoint_path}",
            "--gin.TASK_FEATURE_LENGTHS={'inputs': 24, 'targets': 12}",
            *flags,
            env={"T5FORGE_VOCAB": str(tiny_vocab)},
        )

    return run


def test_eval_and_infer_predict_and_score(tmp_path, checkpoint, run_on_checkpoint):
    step_6 = checkpoint / "checkpoint_6"
    run_on_checkpoint("eval", step_6, f"--gin.EVAL_OUTPUT_DIR={tmp_path / 'eval'}")
    metrics = _jsonl(tmp_path / "eval" / f"{TASK}-metrics.jsonl")[-1]
    assert metrics["step"] == 6 and 0.0 <= metrics["metrics"]["bleu"] <= 100.0

    run_on_checkpoint("infer", step_6, f"--gin.INFER_OUTPUT_DIR={tmp_path / 'predict'}")
    predictions = _jsonl(tmp_path / "predict" / f"{TASK}-predict.jsonl")
    assert len(predictions) == 1000
    assert predictions[0]["inputs"].startswith("translate English to German:")

    run_on_checkpoint(
        "infer", step_6, f"--gin.INFER_OUTPUT_DIR={tmp_path / 'score'}", "--gin.infer.mode=score"
    )
    scores = _jsonl(tmp_path / "score" / f"{TASK}-score.jsonl")
    assert len(scores) == 1000
    assert all(row["score"] < 0.0 for row in scores[:50])


def test_run_leaves_tensorboard_scalars(checkpoint):
    train_events = read_event_scalars(next((checkpoint / "train").glob("events.out.tfevents.*")))
    assert [step for step, _ in train_events["loss"]] == [3, 6]
    assert "learning_rate" in train_events
    eval_events = read_event_scalars(
        next((checkpoint / "training_eval" / TASK).glob("events.out.tfevents.*"))
    )
    assert [step for step, _ in eval_events["loss"]] == [3, 6]


def test_converted_model_generates_the_same_tokens_in_transformers(
    tmp_path, checkpoint, run_t5forge
):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    import t5forge

    hf_dir = tmp_path / "hf"
    run_t5forge(
        "convert", "--from", "t5forge", "--to", "hf", "--input", checkpoint, "--output", hf_dir
    )
    ours = t5forge.load(checkpoint)
    sentences = ["Click the Save button.", "Choose Format - Cells.", "Deletes the rows."]
    inputs = np.zeros((len(sentences), 16), np.int64)
    for row, sentence in enumerate(sentences):
        ids = [*ours.vocabulary.encode(f"translate English to German: {sentence}")[:15], 1]
        inputs[row, : len(ids)] = ids
    expected = ours.generate(inputs, max_length=10, method="greedy")

    hf = transformers.T5ForConditionalGeneration.from_pretrained(hf_dir).eval()
    with torch.no_grad():
        generated = hf.generate(
            input_ids=torch.tensor(inputs),
            attention_mask=torch.tensor(inputs > 0),
            max_new_tokens=10,
            do_sample=False,
            num_beams=1,
        ).numpy()[:, 1:]
    for ours_row, hf_row in zip(expected, generated):
        assert _until_eos(ours_row) == _until_eos(hf_row)


def _until_eos(tokens) -> list[int]:
    tokens = [int(t) for t in tokens]
    return tokens[: tokens.index(1) + 1] if 1 in tokens else tokens
