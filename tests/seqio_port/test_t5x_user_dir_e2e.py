"""The T5X README's custom-task example as a T5X user runs it: the user directory with its
tasks.py and gin file as written there (the vocabulary path aside), T5X's own gin files on
--gin_search_paths, PYTHONPATH at the user directory and --tfds_data_dir at data prepared by
TFDS's writer; a tiny network and 2 steps are the only command-line overrides."""

import json
import os
from pathlib import Path

import pytest
from commands import command_env, t5forge
from t5x_user_dir_setup import write_user_dir

SHARED = Path(os.environ.get("T5FORGE_SHARED_DATA", Path(__file__).parents[3] / "shared" / "data"))
T5X_GIN = SHARED.parent / "t5x_gin"
FIXTURES = Path(__file__).resolve().parents[1] / "data" / "tfds_fixtures"
TINY = {
    "vocab_size": 1152,
    "emb_dim": 32,
    "num_heads": 4,
    "num_encoder_layers": 2,
    "num_decoder_layers": 2,
    "head_dim": 8,
    "mlp_dim": 64,
}


@pytest.mark.slow
def test_user_dir_trains_and_evaluates_bleu(test_spm_path, tmp_path):
    if not T5X_GIN.is_dir():
        pytest.skip(f"T5X's gin files not found at {T5X_GIN}")
    user_dir = write_user_dir(tmp_path / "user_dir", test_spm_path)
    (tmp_path / "clones").mkdir()
    (tmp_path / "clones" / "t5x-tmp").symlink_to(T5X_GIN)  # the README's checkout name
    model_dir = tmp_path / "model"
    result = t5forge(
        "train",
        f"--gin_search_paths={user_dir},{tmp_path / 'clones'},{T5X_GIN}",
        "--gin_file=t5_1_1_base_de_en.gin",
        f'--gin.MODEL_DIR="{model_dir}"',
        "--gin.TASK_FEATURE_LENGTHS={'inputs': 16, 'targets': 16}",
        "--gin.TRAIN_STEPS=2",
        "--gin.BATCH_SIZE=4",
        "--gin.partitioning.PjitPartitioner.num_partitions=1",
        "--gin.train.eval_period=2",
        "--gin.train.eval_steps=1",
        *(f"--gin.network.T5Config.{k}={v}" for k, v in TINY.items()),
        f"--tfds_data_dir={FIXTURES / 'tfrecord'}",
        env=command_env(PYTHONPATH=user_dir),
    )
    assert result.returncode == 0, result.stderr[-2000:]
    rows = [json.loads(line) for line in (model_dir / "metrics.jsonl").read_text().splitlines()]
    bleu = [r for r in rows if r["split"] == "inference_eval/wmt_t2t_de_en_v003"]
    assert bleu and "bleu" in bleu[-1]
