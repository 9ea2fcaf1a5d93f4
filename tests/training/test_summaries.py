"""The files T5X users read: model-info.txt, metrics.jsonl, TensorBoard events, the curve plot."""

import numpy as np
from event_files import read_event_scalars

from t5forge.training.summaries import (
    MetricsWriter,
    curve_series,
    plot_training_curves,
    read_metrics,
    write_model_info,
)


def test_model_info_matches_t5x_layout(tmp_path):
    shapes = {
        "decoder": {"decoder_norm": {"scale": np.zeros(8)}},
        "token_embedder": {"embedding": np.zeros((32, 8))},
    }
    axes = {
        "decoder": {"decoder_norm": {"scale": ("embed",)}},
        "token_embedder": {"embedding": ("vocab", "embed")},
    }
    specs = {
        "decoder": {"decoder_norm": {"scale": "PartitionSpec(None,)"}},
        "token_embedder": {"embedding": "PartitionSpec('model', None)"},
    }
    opt = {"token_embedder": {"embedding": {"v_row": np.zeros(32), "v_col": np.zeros(8)}}}
    total = write_model_info(tmp_path / "model-info.txt", shapes, axes, specs, opt)
    assert total == 8 + 32 * 8
    lines = (tmp_path / "model-info.txt").read_text().splitlines()
    assert lines[0].startswith("Variable decoder/decoder_norm/scale" + " " * (80 - 27))
    assert "size 8            shape (embed=8)" in lines[0]
    assert lines[0].endswith("partition spec PartitionSpec(None,)")
    assert "shape (vocab=32, embed=8)" in lines[1]
    assert lines[2] == "Total number of parameters: 264"
    assert lines[3] == ""
    assert lines[4].startswith("Variable state/token_embedder/embedding/v_col")


def test_metrics_go_to_tensorboard_jsonl_and_plot(tmp_path):
    writer = MetricsWriter(tmp_path)
    for step in range(1, 6):
        writer.write_scalars(step, {"loss": 10.0 / step, "learning_rate": 0.01}, split="train")
    writer.write_scalars(5, {"loss": 3.0, "accuracy": 0.5}, split="training_eval/toy_task")
    writer.write_scalars(5, {"bleu": 12.5}, split="inference_eval")
    writer.write_scalars(6, {"loss": float("nan")}, split="train")
    writer.close()
    records = read_metrics(tmp_path)
    assert [r["step"] for r in records] == [1, 2, 3, 4, 5, 5, 5, 6]
    assert records[-1]["loss"] == "nan"
    for split in ("train", "training_eval/toy_task", "inference_eval"):
        events = list((tmp_path / split).glob("events.out.tfevents.*"))
        assert events and events[0].stat().st_size > 0
    scalars = read_event_scalars(next((tmp_path / "train").glob("events.out.tfevents.*")))
    assert scalars["loss"][:2] == [(1, 10.0), (2, 5.0)]
    assert scalars["learning_rate"][0] == (1, np.float32(0.01))
    png = plot_training_curves(tmp_path)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_task_accuracy_gets_its_own_panel_apart_from_token_accuracy():
    records = [
        {"step": 100, "split": "train", "accuracy": 0.9, "loss": 1.0, "z_loss": 0.1},
        {"step": 100, "split": "training_eval/sst", "accuracy": 0.8},
        {"step": 100, "split": "inference_eval/sst", "accuracy": 72.5, "f1": 70.0},
    ]
    assert curve_series(records) == {
        ("train", "accuracy"): [(100, 0.9)],
        ("train", "loss"): [(100, 1.0)],
        ("training_eval/sst", "accuracy"): [(100, 0.8)],
        ("inference_eval/sst", "sst: accuracy"): [(100, 72.5)],
        ("inference_eval/sst", "sst: f1"): [(100, 70.0)],
    }
