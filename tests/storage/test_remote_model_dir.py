"""MODEL_DIR on a bucket (a real S3 protocol server on loopback): a run killed mid-way resumes on a
fresh machine from the bucket alone with the same losses, and `infer` reads the bucket's run."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest
from commands import QUIET_TRAIN, REPO, TASK, command_env, t5forge, t5forge_popen

from t5forge import storage
from t5forge.checkpoints.integrity import CHECKSUMS_FILE
from t5forge.checkpoints.remote_model_dir import complete_steps, local_copy

EN_DE = REPO / "t5forge" / "tasks" / "data" / "en_de_lohelp"
STEPS = 200


def _train_args(model_dir, gin, *extra) -> list[str]:
    """`train` of `gin`'s model from scratch, a checkpoint every 10 steps, no evaluation."""
    return [
        "train",
        f"--gin_file={gin}",
        "--gin_file=runs/finetune.gin",
        f"--gin.MODEL_DIR={model_dir}",
        f"--gin.MIXTURE_OR_TASK_NAME={TASK}",
        "--gin.TASK_FEATURE_LENGTHS={'inputs': 24, 'targets': 24}",
        f"--gin.TRAIN_STEPS={STEPS}",
        "--gin.BATCH_SIZE=4",
        "--gin.INITIAL_CHECKPOINT_PATH=None",
        "--gin.CHECKPOINT_PERIOD=10",
        *QUIET_TRAIN,
        *extra,
    ]


def _losses(text: str) -> dict[int, float]:
    rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    train = [row for row in rows if row["split"] == "train"]
    assert len({row["step"] for row in train}) == len(train), "duplicate metrics rows"
    return {row["step"]: row["loss"] for row in train}


@pytest.mark.slow
def test_killed_run_resumes_from_the_bucket_on_a_fresh_machine(
    bucket, s3_env, tiny_vocab, tiny_model_gin, tmp_path
):
    vocab = f"{bucket}/vocab/spiece.model"
    storage.path(vocab).write_bytes(tiny_vocab.read_bytes())
    for split in ("train", "validation"):
        storage.path(f"{bucket}/data/en_de_lohelp/{split}.jsonl.gz").write_bytes(
            (EN_DE / f"{split}.jsonl.gz").read_bytes()
        )
    env = command_env(T5FORGE_VOCAB=vocab, T5FORGE_DATA_DIR=f"{bucket}/data")  # and s3_env's

    straight = tmp_path / "straight"
    t5forge(*_train_args(straight, tiny_model_gin), env=env, check=True)
    expected = _losses((straight / "metrics.jsonl").read_text())

    # The task preprocessed once into the bucket (as `t5forge cache-tasks` on a preprocessing
    # machine), then read from there by the runs below: the cache holds the examples in their
    # uncached order, so the losses must still equal the uncached local run's.
    cache = f"{bucket}/cache"
    t5forge(
        "cache-tasks",
        f"--tasks={TASK}",
        f"--output_cache_dir={cache}",
        "--splits=train",
        "--no_progress",
        env={**env, "T5FORGE_STAGING_DIR": str(tmp_path / "preprocessing")},
        check=True,
    )
    assert json.loads(storage.path(f"{cache}/{TASK}/COMPLETED").read_text())["splits"] == ["train"]
    use_cache = (f"--seqio_additional_cache_dirs={cache}", "--gin.USE_CACHED_TASKS=True")

    run = f"{bucket}/runs/en_de"
    first_machine = {**env, "T5FORGE_STAGING_DIR": str(tmp_path / "machine_a")}
    log = tmp_path / "killed.log"
    with log.open("w") as stderr:
        process = t5forge_popen(*_train_args(run, tiny_model_gin), env=first_machine, stderr=stderr)
    deadline = time.time() + 600
    while not complete_steps(run) and time.time() < deadline:
        assert process.poll() is None, log.read_text()[-3000:]
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    copied = complete_steps(run)
    assert copied and copied[-1] < STEPS, copied

    second_machine = {**env, "T5FORGE_STAGING_DIR": str(tmp_path / "machine_b")}
    resumed = t5forge(*_train_args(run, tiny_model_gin, *use_cache), env=second_machine, check=True)
    assert f"fetching {run}/checkpoint_{copied[-1]}" in resumed.stderr
    assert list((tmp_path / "machine_b").glob(f"*_cache_{TASK}/train.array_record-*"))
    assert complete_steps(run)[-1] == STEPS
    assert _losses(storage.path(f"{run}/metrics.jsonl").read_text()) == expected
    for name in ("config.gin", "model-info.txt"):
        assert storage.path(f"{run}/{name}").exists(), name
    assert storage.glob(f"{run}/train/events.out.tfevents.*")
    assert not storage.path(f"{run}/train.lock").exists()

    # A checkpoint whose copy was cut off (no checksums object) is not taken for complete.
    storage.path(f"{run}/checkpoint_{STEPS}/{CHECKSUMS_FILE}").unlink()
    assert complete_steps(run)[-1] < STEPS
    assert Path(local_copy(run)).name == f"checkpoint_{complete_steps(run)[-1]}"

    t5forge(
        "infer",
        f"--gin_file={tiny_model_gin}",
        "--gin_file=runs/infer.gin",
        f"--gin.CHECKPOINT_PATH={run}",
        f"--gin.INFER_OUTPUT_DIR={bucket}/infer",
        f"--gin.MIXTURE_OR_TASK_NAME={TASK}",
        "--gin.TASK_FEATURE_LENGTHS={'inputs': 24, 'targets': 8}",
        env={**env, "T5FORGE_STAGING_DIR": str(tmp_path / "machine_c")},
        check=True,
    )
    rows = storage.path(f"{bucket}/infer/{TASK}-predict.jsonl").read_text().splitlines()
    assert rows and all("prediction" in json.loads(row) for row in rows)
