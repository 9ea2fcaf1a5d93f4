"""examples/from_t5x, run as its README says (T5X's gin files, SeqIO's and T5X main.py's command
lines, the flagfiles), at tiny size on slices of en_de_lohelp.

The network is T5X's small.gin with tests/tiny_model.py's sizes bound on the command line,
as a T5X user overrides a model file.
"""

import gzip
import json
import re

import pytest
from tiny_model import TINY_GIN_VALUES

pytestmark = pytest.mark.slow
ROWS = {"train": 64, "validation": 32, "test": 24}
SMALL = "--gin_file=t5x/examples/t5/t5_1_1/small.gin"
TINY = [f"--gin.network.T5Config.{name}={value}" for name, value in TINY_GIN_VALUES.items()]
ABSL_LINE = re.compile(r"^I\d{4} \d\d:\d\d:\d\d\.\d{6} +\d+ [\w.]+:\d+\] ", re.MULTILINE)


def _slice_data(shared_data, target):
    (target / "en_de_lohelp").mkdir(parents=True)
    for split, rows in ROWS.items():
        with gzip.open(shared_data / "en_de_lohelp" / f"{split}.jsonl.gz", "rt") as source:
            lines = [line for _, line in zip(range(rows), source)]
        with gzip.open(target / "en_de_lohelp" / f"{split}.jsonl.gz", "wt") as sliced:
            sliced.writelines(lines)


def test_cache_train_eval_and_infer_as_a_t5x_user(tmp_path, shared_data, tiny_vocab, run_t5forge):
    t5x_gin = shared_data.parent / "t5x_gin"  # T5X's gin files, as the README's $T5X
    if not t5x_gin.is_dir():
        pytest.skip(f"T5X's gin files not found at {t5x_gin}")
    _slice_data(shared_data, tmp_path / "data")
    env = {"T5FORGE_DATA_DIR": str(tmp_path / "data"), "T5FORGE_VOCAB": str(tiny_vocab)}
    cache, model, logs = tmp_path / "cache", tmp_path / "model", tmp_path / "logs"
    run_t5forge(
        "cache-tasks",
        "--module_import=examples.from_t5x.tasks",
        "--tasks=lohelp_.*",
        f"--output_cache_dir={cache}",
        "--min_shards=2",
        "--alsologtostderr",
        "--no_progress",
        env=env,
    )
    assert sorted(p.name for p in (cache / "lohelp_de_en").glob("info.*.json")) == [
        "info.test.json",
        "info.train.json",
        "info.validation.json",
    ]

    t5x_main = ["--gin_search_paths", str(t5x_gin), SMALL]
    trained = run_t5forge(
        "--run_mode=train",
        *t5x_main,
        "--gin_file=t5x/configs/runs/pretrain.gin",
        "--flagfile=examples/from_t5x/train.flags",
        "--alsologtostderr",
        f"--log_dir={logs}",
        # the test's sizes and directories over the flagfile's
        f"--gin.MODEL_DIR='{model}'",
        f"--seqio_additional_cache_dirs={cache}",
        "--gin.TRAIN_STEPS=2",
        "--gin.BATCH_SIZE=8",
        "--gin.train.eval_steps=1",
        *TINY,
        env=env,
    )
    assert (model / "checkpoint_2").is_dir() and (model / "config.gin").is_file()
    assert ABSL_LINE.search((logs / "t5forge.INFO").read_text())
    assert ABSL_LINE.search(trained.stderr)  # --alsologtostderr

    at_checkpoint = [
        "--flagfile=examples/from_t5x/checkpoint.flags",
        f"--gin.CHECKPOINT_PATH='{model / 'checkpoint_2'}'",
        "--gin.TASK_FEATURE_LENGTHS={'inputs': 64, 'targets': 8}",
        "--gin.utils.DatasetConfig.batch_size=24",
        *TINY,
    ]
    run_t5forge(
        "--run_mode=eval",
        *t5x_main,
        "--gin_file=t5x/configs/runs/eval.gin",
        *at_checkpoint,
        f"--gin.EVAL_OUTPUT_DIR='{tmp_path / 'eval'}'",
        env=env,
    )
    (row,) = [json.loads(line) for line in (tmp_path / "eval" / "metrics.jsonl").open()]
    assert row["split"] == "inference_eval/lohelp_de_en" and row["step"] == 2 and "bleu" in row
    run_t5forge(
        "--run_mode=infer",
        *t5x_main,
        "--gin_file=t5x/configs/runs/infer.gin",
        *at_checkpoint,
        f"--gin.INFER_OUTPUT_DIR='{tmp_path / 'infer'}'",
        env=env,
    )
    predictions = (tmp_path / "infer" / "lohelp_de_en-predict.jsonl").read_text().splitlines()
    assert len(predictions) == ROWS["test"]  # runs/infer.gin reads the test split

    # back to T5X: the trained model as a T5X checkpoint, at the step it was trained to
    run_t5forge(
        "convert",
        "--from=t5forge",
        "--to=t5x",
        f"--input={model / 'checkpoint_2'}",
        f"--output={tmp_path / 't5x'}",
        env=env,
    )
    assert (tmp_path / "t5x" / "checkpoint_2" / "checkpoint").is_file()
    assert (tmp_path / "t5x" / "checkpoint_2" / "target.token_embedder.embedding").is_dir()
