"""examples/classify_sentiment, run as its README says, at tiny size.

English vocabulary with the labels as whole pieces -> span-corruption pretraining on
english_corpus and the reviews (a mixture of a built-in and an unregistered task) -> fine-tuning from that checkpoint with label prediction in
inference_eval and best-by-accuracy checkpoint retention (keep=1) -> `t5forge infer` on the
kept checkpoint, which must predict exactly what inference_eval predicted.
"""

import json

import pytest

pytestmark = pytest.mark.slow
TASK = "classify_sentiment"
METRIC = f"inference_eval/{TASK}/accuracy"


def _records(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def trained(tmp_path_factory, sentiment_vocab, tiny_model_gin, run_t5forge):
    root = tmp_path_factory.mktemp("classify_sentiment")
    env = {"T5FORGE_VOCAB": str(sentiment_vocab)}
    pretrain = root / "pretrain"
    run_t5forge(
        "train",
        "--gin_file=examples/classify_sentiment/pretrain.gin",
        f"--gin_file={tiny_model_gin}",
        f"--gin.MODEL_DIR={pretrain}",
        "--gin.TRAIN_STEPS=4",
        "--gin.EVAL_PERIOD=4",
        "--gin.CHECKPOINT_PERIOD=4",
        "--gin.train.eval_steps=1",
        "--gin.BATCH_SIZE=8",
        "--gin.TASK_FEATURE_LENGTHS={'inputs': 64, 'targets': 16}",
        env=env,
    )
    evaluated = {r["split"] for r in _records(pretrain / "metrics.jsonl") if r["step"] == 4}
    assert {
        "training_eval/english_span_corruption",
        "training_eval/reviews_span_corruption",
    } <= evaluated, evaluated
    model_dir = root / "run"
    finetuned = run_t5forge(
        "train",
        "--gin_file=examples/classify_sentiment/classify_sentiment.gin",
        f"--gin_file={tiny_model_gin}",
        f"--gin.MODEL_DIR={model_dir}",
        f"--gin.INITIAL_CHECKPOINT_PATH={pretrain / 'checkpoint_4'}",
        "--gin.TRAIN_STEPS=30",
        "--gin.EVAL_PERIOD=10",
        "--gin.CHECKPOINT_PERIOD=10",
        "--gin.BATCH_SIZE=16",
        "--gin.train.eval_steps=2",
        "--gin.utils.SaveCheckpointConfig.async_save=False",
        "--gin.utils.create_learning_rate_scheduler.base_learning_rate=0.01",
        env=env,
    )
    assert "parameters from the checkpoint, kept 0 freshly initialised" in finetuned.stderr
    return root, model_dir, env


def test_label_predictions_and_best_checkpoint_kept(trained):
    _, model_dir, _ = trained
    predictions = _records(model_dir / "inference_eval" / f"{TASK}-predictions.jsonl")
    assert len(predictions) == 1000
    assert {row["prediction"] for row in predictions} <= {"fresh", "rotten"}
    assert predictions[0]["inputs"].startswith("sentiment: ")
    accuracy = {}
    for record in _records(model_dir / "metrics.jsonl"):
        if record["split"] == f"inference_eval/{TASK}" and record["step"]:
            accuracy[record["step"]] = record["accuracy"]
    assert sorted(accuracy) == [10, 20, 30]
    kept = sorted(int(p.name.split("_")[1]) for p in model_dir.glob("checkpoint_*"))
    assert 30 in kept and len(kept) <= 2, kept
    assert max(accuracy[step] for step in kept) == max(accuracy.values()), (kept, accuracy)


def test_infer_predicts_the_labels_inference_eval_did(trained, tiny_model_gin, run_t5forge):
    root, model_dir, env = trained
    infer_dir = root / "infer"
    run_t5forge(
        "infer",
        "--gin_file=runs/infer.gin",
        "--gin_file=examples/classify_sentiment/model.gin",
        f"--gin_file={tiny_model_gin}",
        "--module_import=examples.classify_sentiment.tasks",
        f"--gin.CHECKPOINT_PATH={model_dir / 'checkpoint_30'}",
        f"--gin.INFER_OUTPUT_DIR={infer_dir}",
        f"--gin.MIXTURE_OR_TASK_NAME={TASK}",
        "--gin.TASK_FEATURE_LENGTHS={'inputs': 64, 'targets': 2}",
        env=env,
    )
    inferred = [row["prediction"] for row in _records(infer_dir / f"{TASK}-predict.jsonl")]
    evaluated = [
        row["prediction"]
        for row in _records(model_dir / "inference_eval" / f"{TASK}-predictions.jsonl")
    ]
    assert inferred == evaluated
