"""examples/pretrain_ul2 and runs/pretrain_ul2.gin, run as their README says, at tiny size.

UL2 pretraining stopped and extended equals an uninterrupted run loss for loss (the denoiser
draws resume with the data); fine-tuning with the mode token reads the pretrained
checkpoint; a decoder-only model pretrains on the same task as prefix and continuation.
"""

import json
import math

import pytest

pytestmark = pytest.mark.slow

LENGTHS = "--gin.TASK_FEATURE_LENGTHS={'inputs': 64, 'targets': 32}"


def _losses(model_dir, split="train") -> dict[int, float]:
    rows = [json.loads(line) for line in (model_dir / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["loss"] for r in rows if r["split"] == split}


def _pretrain(run_t5forge, tiny_model_gin, model_dir, steps, env):
    return run_t5forge(
        "train",
        "--gin_file=examples/pretrain_ul2/pretrain_ul2.gin",
        f"--gin_file={tiny_model_gin}",
        f"--gin.MODEL_DIR={model_dir}",
        LENGTHS,
        "--gin.BATCH_SIZE=4",
        "--gin.CHECKPOINT_PERIOD=2",
        "--gin.EVAL_PERIOD=0",
        "--gin.train.train_eval_dataset_cfg=None",
        "--gin.train.stats_period=1",
        "--gin.utils.SaveCheckpointConfig.async_save=False",
        f"--gin.TRAIN_STEPS={steps}",
        env=env,
    )


@pytest.fixture(scope="module")
def vocab_env(sentiment_vocab):
    return {"T5FORGE_VOCAB": str(sentiment_vocab)}


def test_ul2_resumes_exactly_and_fine_tunes_with_its_mode_token(
    tmp_path, vocab_env, tiny_model_gin, run_t5forge
):
    env = vocab_env
    straight, stopped = tmp_path / "straight", tmp_path / "stopped"
    _pretrain(run_t5forge, tiny_model_gin, straight, 4, env)
    _pretrain(run_t5forge, tiny_model_gin, stopped, 2, env)
    extended = _pretrain(run_t5forge, tiny_model_gin, stopped, 4, env)
    assert "resumed from" in extended.stderr
    assert _losses(stopped) == _losses(straight) and sorted(_losses(straight)) == [1, 2, 3, 4]

    tuned = tmp_path / "tuned"
    run_t5forge(
        "train",
        "--gin_file=examples/pretrain_ul2/finetune_nlu.gin",
        f"--gin_file={tiny_model_gin}",
        f"--gin.MODEL_DIR={tuned}",
        f"--gin.INITIAL_CHECKPOINT_PATH={straight / 'checkpoint_4'}",
        "--gin.BATCH_SIZE=8",
        "--gin.TRAIN_STEPS=2",
        "--gin.EVAL_PERIOD=2",
        "--gin.train.eval_steps=1",
        env=env,
    )
    rows = [json.loads(line) for line in (tuned / "metrics.jsonl").read_text().splitlines()]
    evaluated = [r for r in rows if r["split"] == "inference_eval/classify_sentiment_nlu"]
    assert evaluated and 0 <= evaluated[-1]["accuracy"] <= 100


def test_decoder_only_model_pretrains_on_ul2(tmp_path, vocab_env, run_t5forge):
    model_dir = tmp_path / "decoder_only"
    run_t5forge(
        "train",
        "--gin_file=runs/pretrain_ul2.gin",
        "--gin_file=models/decoder_only/tiny.gin",
        "--gin.T5Config.vocab_size=1152",
        "--gin.T5Config.dtype='float32'",
        f"--gin.MODEL_DIR={model_dir}",
        LENGTHS,
        "--gin.BATCH_SIZE=4",
        "--gin.TRAIN_STEPS=2",
        "--gin.EVAL_PERIOD=2",
        "--gin.train.eval_steps=1",
        env=vocab_env,
    )
    for split in ("train", "training_eval/english_ul2"):
        losses = _losses(model_dir, split)
        assert 2 in losses and all(math.isfinite(v) for v in losses.values()), (split, losses)
