"""examples/multitask_t0, run as its README says, at tiny size on slices of the shared data.

`t5forge cache-tasks` caches both mixtures, then `t5forge train` reads only those caches
(USE_CACHED_TASKS=True), packs the mixture and evaluates every eval task: BLEU / ROUGE on
decoded predictions, rank-classification accuracy on scored answer choices.
"""

import gzip
import json

import pytest

pytestmark = pytest.mark.slow
SLICES = {
    "en_de_lohelp": 48,
    "en_ro_messages": 48,
    "debian_descriptions": 96,
    "rotten_tomatoes": 48,
}
EXPECTED_METRICS = {
    "t0_translate_en_de_eval": {"bleu"},
    "t0_translate_en_ro_eval": {"bleu"},
    "t0_summarize_debian_eval": {"rouge1", "rouge2", "rougeL"},
    "t0_sentiment_rank_eval": {"accuracy"},
    "t0_debian_section_rank_eval": {"accuracy"},
}


def _slice_datasets(shared_data, target):
    """The first rows of each split of the datasets the mixture reads (same layout)."""
    for folder, rows in SLICES.items():
        (target / folder).mkdir(parents=True)
        for split in ("train", "validation"):
            with gzip.open(shared_data / folder / f"{split}.jsonl.gz", "rt") as source:
                lines = [line for _, line in zip(range(rows), source)]
            with gzip.open(target / folder / f"{split}.jsonl.gz", "wt") as sliced:
                sliced.writelines(lines)


def test_cache_pack_train_and_evaluate_every_task(
    tmp_path, shared_data, tiny_vocab, tiny_model_gin, run_t5forge
):
    _slice_datasets(shared_data, tmp_path / "data")
    cache_dir = tmp_path / "cache"
    env = {
        "T5FORGE_VOCAB": str(tiny_vocab),
        "T5FORGE_DATA_DIR": str(tmp_path / "data"),
        "T5FORGE_CACHE_DIR": str(cache_dir),
        "T0_EVAL_EXAMPLES": "8",
    }
    run_t5forge(
        "cache-tasks",
        "--tasks=t0_train,t0_eval",
        f"--output_cache_dir={cache_dir}",
        "--module_import=examples.multitask_t0.tasks",
        "--no_progress",
        env=env,
    )
    cached = sorted(path.parent.name for path in cache_dir.glob("*/COMPLETED"))
    assert len(cached) == 10 and "t0_sentiment_rank_eval" in cached, cached

    model_dir = tmp_path / "run"
    run_t5forge(
        "train",
        "--gin_file=examples/multitask_t0/t0.gin",
        f"--gin_file={tiny_model_gin}",
        "--module_import=examples.multitask_t0.tasks",
        f"--gin.MODEL_DIR={model_dir}",
        "--gin.TASK_FEATURE_LENGTHS={'inputs': 64, 'targets': 16}",
        "--gin.TRAIN_STEPS=4",
        "--gin.EVAL_PERIOD=4",
        "--gin.BATCH_SIZE=8",
        "--gin.train.eval_steps=1",
        "--gin.train.infer_max_decode_length=8",
        "--gin.utils.SaveCheckpointConfig.async_save=False",
        env=env,
    )

    config = (model_dir / "config.gin").read_text()
    assert "PACK = True" in config and "USE_CACHED_TASKS = True" in config
    final = {}
    for line in (model_dir / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        if record["split"].startswith("inference_eval/") and record["step"] == 4:
            final[record["split"].split("/", 1)[1]] = record
    assert set(final) == set(EXPECTED_METRICS)
    for task, names in EXPECTED_METRICS.items():
        assert names <= set(final[task]), (task, final[task])
    assert 0.0 <= final["t0_sentiment_rank_eval"]["accuracy"] <= 100.0
    scored = [
        json.loads(line)
        for line in (model_dir / "inference_eval" / "t0_sentiment_rank_eval-predictions.jsonl")
        .read_text()
        .splitlines()
    ]
    assert len(scored) == 16  # 8 reviews x 2 answer choices, each with its log-likelihood
    assert all(row["score"] < 0 for row in scored)
    assert {row["inputs"].startswith("Review: ") for row in scored} == {True, False}  # 2 prompts
