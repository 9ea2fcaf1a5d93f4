"""`t5forge train` with runs/finetune.gin decodes the validation split and logs BLEU as it trains."""

import json

import pytest
from commands import TASK
from test_train_e2e import _losses


@pytest.mark.slow
def test_finetune_run_writes_inference_eval_predictions_and_bleu(tiny_runs, tmp_path):
    model_dir = tmp_path / "infer_eval"
    # BATCH_SIZE 200: the 400-row validation split decodes in two batches.
    tiny_runs.train(
        model_dir,
        2,
        "--gin.EVAL_PERIOD=2",
        "--gin.BATCH_SIZE=200",
        "--gin.train.progress=False",
        "--gin.train.train_eval_dataset_cfg=None",
        "--gin.infer_eval/utils.DatasetConfig.split=validation",
        quiet=False,
        check=True,
    )

    rows = [
        json.loads(line)
        for line in (model_dir / "inference_eval" / f"{TASK}-predictions.jsonl")
        .read_text()
        .splitlines()
    ]
    assert len(rows) == 400
    assert all({"inputs", "targets", "prediction"} <= set(row) for row in rows)
    assert rows[0]["inputs"].startswith("translate English to German:")
    # evaluated before training (step 0) and at EVAL_PERIOD
    bleu = _losses(model_dir, split=f"inference_eval/{TASK}", key="bleu")
    assert sorted(bleu) == [0, 2]
    assert all(0.0 <= value <= 100.0 for value in bleu.values())
    assert list((model_dir / "inference_eval" / TASK).glob("events.out.tfevents.*"))
