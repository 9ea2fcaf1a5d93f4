"""The T5X README's custom-task example as a T5X user runs it: the user directory with its
tasks.py and gin file as written there (the vocabulary path aside), T5X's own gin files on
--gin_search_paths, PYTHONPATH at the user directory and --tfds_data_dir at data prepared by
TFDS's writer, in both of TFDS's file formats; a tiny network and 2 steps are the only
command-line overrides. eval_period is overridden in both of the spellings T5X's run files
allow (`train_script.train.eval_period`, through their `import __main__ as train_script`, and
`train.eval_period`): each format's run takes one, and a dry run checks both reach train. Then
T5X's base_wmt_infer.gin over the trained checkpoint, and T5's own tasks (its registry: WMT,
then GLUE) through T5X's run files."""

import json
import os
import re
from pathlib import Path

import pytest
from commands import command_env, t5forge
from t5x_user_dir_setup import write_user_dir
from tiny_model import TINY_GIN_VALUES

SHARED = Path(os.environ.get("T5FORGE_SHARED_DATA", Path(__file__).parents[3] / "shared" / "data"))
T5X_GIN = SHARED.parent / "t5x_gin"
FIXTURES = Path(__file__).resolve().parents[1] / "data" / "tfds_fixtures"
TASK = "wmt_t2t_de_en_v003"
TINY_FLAGS = [f"--gin.network.T5Config.{k}={v}" for k, v in TINY_GIN_VALUES.items()]
LENGTHS = "--gin.TASK_FEATURE_LENGTHS={'inputs': 16, 'targets': 16}"
# The two spellings of train's eval_period a T5X user writes; each format's run takes one.
EVAL_PERIOD = {"tfrecord": "train_script.train.eval_period", "array_record": "train.eval_period"}


def _rows(model_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (model_dir / "metrics.jsonl").read_text().splitlines()]


def _user_dir(root: Path, vocabulary: Path) -> tuple[str, dict]:
    """The README's user directory under `root`: (--gin_search_paths flag, environment)."""
    user_dir = write_user_dir(root / "user_dir", vocabulary)
    (root / "clones").mkdir()
    (root / "clones" / "t5x-tmp").symlink_to(T5X_GIN)  # the README's checkout name
    search = f"--gin_search_paths={user_dir},{root / 'clones'},{T5X_GIN}"
    return search, command_env(PYTHONPATH=user_dir)


@pytest.fixture(scope="module", params=["tfrecord", "array_record"])
def user_run(request, test_spm_path, tmp_path_factory):
    """The README's training command over TFDS data in one file format: (run, env, flags)."""
    if not T5X_GIN.is_dir():
        pytest.skip(f"T5X's gin files not found at {T5X_GIN}")
    root = tmp_path_factory.mktemp(f"user_{request.param}")
    search, env = _user_dir(root, test_spm_path)
    data = f"--tfds_data_dir={FIXTURES / request.param}"
    model_dir = root / "model"
    t5forge(
        "train",
        search,
        "--gin_file=t5_1_1_base_de_en.gin",
        f'--gin.MODEL_DIR="{model_dir}"',
        LENGTHS,
        "--gin.TRAIN_STEPS=2",
        "--gin.BATCH_SIZE=4",
        "--gin.partitioning.PjitPartitioner.num_partitions=1",
        f"--gin.{EVAL_PERIOD[request.param]}=2",
        "--gin.train.eval_steps=1",
        *TINY_FLAGS,
        data,
        env=env,
        check=True,
    )
    return model_dir, env, (search, data)


@pytest.mark.parametrize("spelling", sorted(EVAL_PERIOD.values()))
def test_both_spellings_of_eval_period_reach_train(spelling, test_spm_path, tmp_path):
    """The README's command with --dry_run: the configuration train would run with."""
    if not T5X_GIN.is_dir():
        pytest.skip(f"T5X's gin files not found at {T5X_GIN}")
    search, env = _user_dir(tmp_path, test_spm_path)
    result = t5forge(
        "train",
        search,
        "--gin_file=t5_1_1_base_de_en.gin",
        f'--gin.MODEL_DIR="{tmp_path / "model"}"',
        f"--gin.{spelling}=4",
        f"--tfds_data_dir={FIXTURES / 'tfrecord'}",
        "--dry_run",
        env=env,
        check=True,
    )
    bound = re.findall(r"^(?:\w+\.)*train\.eval_period = (\d+)$", result.stdout, re.MULTILINE)
    assert bound == ["4"], result.stdout


@pytest.mark.slow
def test_user_dir_trains_and_evaluates_bleu(user_run):
    model_dir, _, _ = user_run
    bleu = [r for r in _rows(model_dir) if r["split"] == f"inference_eval/{TASK}"]
    assert bleu and "bleu" in bleu[-1]


@pytest.mark.slow
def test_infer_gin_predicts_the_test_split(user_run, tmp_path):
    model_dir, env, flags = user_run
    t5forge(
        "infer",
        *flags,
        "--gin_file=t5x/examples/t5/t5_1_1/examples/base_wmt_infer.gin",
        f"--gin.MIXTURE_OR_TASK_NAME='{TASK}'",
        "--gin.MIXTURE_OR_TASK_MODULE='tasks'",
        LENGTHS,
        f"--gin.CHECKPOINT_PATH='{model_dir / 'checkpoint_2'}'",
        f"--gin.INFER_OUTPUT_DIR='{tmp_path}'",
        "--gin.utils.DatasetConfig.batch_size=4",
        *TINY_FLAGS,
        env=env,
        check=True,
    )
    written = [
        line for path in tmp_path.rglob("*.jsonl*") for line in path.read_text().splitlines()
    ]
    test_split = json.loads(
        (FIXTURES / "tfrecord/wmt_t2t_translate/de-en/1.0.0/dataset_info.json").read_text()
    )["splits"]
    expected = next(
        int(sum(map(int, s["shardLengths"]))) for s in test_split if s["name"] == "test"
    )
    assert len(written) == expected
    assert all("prediction" in json.loads(line) for line in written)


@pytest.mark.slow
def test_t5_tasks_train_through_t5x_run_files(test_spm_path, tmp_path):
    """T5's wmt_t2t_ende_v003 through base_wmt_from_scratch.gin unchanged (its runs/pretrain.gin
    imports t5.data.mixtures), then GLUE's SST-2 fine-tuned from it through runs/finetune.gin."""
    if not T5X_GIN.is_dir():
        pytest.skip(f"T5X's gin files not found at {T5X_GIN}")
    env = command_env(T5FORGE_VOCAB=test_spm_path)
    common = [f"--gin_search_paths={T5X_GIN}", f"--tfds_data_dir={FIXTURES / 'tfrecord'}"]
    common += [LENGTHS, "--gin.BATCH_SIZE=4", "--gin.train.eval_steps=1", *TINY_FLAGS]
    scratch, finetuned = tmp_path / "wmt", tmp_path / "sst2"
    t5forge(
        "train",
        "--gin_file=t5x/examples/t5/t5_1_1/examples/base_wmt_from_scratch.gin",
        f"--gin.MODEL_DIR='{scratch}'",
        "--gin.TRAIN_STEPS=2",
        "--gin.partitioning.PjitPartitioner.num_partitions=1",
        "--gin.train.eval_period=2",
        *common,
        env=env,
        check=True,
    )
    assert "bleu" in [r for r in _rows(scratch) if r["split"].endswith("wmt_t2t_ende_v003")][-1]
    t5forge(
        "train",
        "--gin_file=t5x/examples/t5/t5_1_1/base.gin",
        "--gin_file=t5x/configs/runs/finetune.gin",
        "--gin.MIXTURE_OR_TASK_NAME='glue_sst2_v002'",
        "--gin.MIXTURE_OR_TASK_MODULE='t5.data.mixtures'",
        "--gin.USE_CACHED_TASKS=False",
        f"--gin.INITIAL_CHECKPOINT_PATH='{scratch / 'checkpoint_2'}'",
        f"--gin.MODEL_DIR='{finetuned}'",
        "--gin.TRAIN_STEPS=4",
        "--gin.train.eval_period=2",
        *common,
        env=env,
        check=True,
    )
    accuracy = [r for r in _rows(finetuned) if r["split"] == "inference_eval/glue_sst2_v002"]
    assert accuracy and "accuracy" in accuracy[-1]
