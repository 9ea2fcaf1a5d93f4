"""The checks a run's gin bindings get once parsed (t5forge.gin_config.binding_checks), in process:
wrong types and impossible values, malformed literals, unused bindings; and no report at all
for the configs t5forge ships, each under the command it is meant for."""

import os
from pathlib import Path

import gin
import pytest

from t5forge.cli import run_flags
from t5forge.errors import ConfigError
from t5forge.gin_config import binding_types, gin_syntax
from t5forge.run.dataset_and_checkpoint_configs import DatasetConfig

REPO = Path(__file__).resolve().parents[2]
# T5X's own files (../shared/t5x_gin), with the built-in task in place of T5's WMT task.
T5X_GIN = Path(os.environ.get("T5FORGE_SHARED_DATA", REPO.parent / "shared" / "data")).parent / (
    "t5x_gin"
)
T5X = [f"--gin_search_paths={T5X_GIN}", "--gin.MIXTURE_OR_TASK_NAME=en_de_lohelp_translate"]
T5X_EXAMPLES = "t5x/examples/t5/t5_1_1/examples"
TRAIN = [
    "--gin.MODEL_DIR=/tmp/m",
    "--gin.TRAIN_STEPS=10",
    "--gin.MIXTURE_OR_TASK_NAME=t",
    "--gin.TASK_FEATURE_LENGTHS={'inputs': 8, 'targets': 8}",
]
SMALL = "--gin_file=models/t5_1_1/small.gin"
STOCK = {  # name -> (command, flags): each config as its README or test runs it
    "pretrain": ("train", [SMALL, "--gin_file=runs/pretrain.gin", *TRAIN]),
    "finetune": (
        "train",
        [SMALL, "--gin_file=runs/finetune.gin", *TRAIN, "--gin.INITIAL_CHECKPOINT_PATH=None"],
    ),
    "eval": (
        "eval",
        [
            SMALL,
            "--gin_file=runs/eval.gin",
            "--gin.CHECKPOINT_PATH=/c",
            "--gin.EVAL_OUTPUT_DIR=/e",
            "--gin.MIXTURE_OR_TASK_NAME=t",
        ],
    ),
    "infer": (
        "infer",
        [
            SMALL,
            "--gin_file=runs/infer.gin",
            "--gin.CHECKPOINT_PATH=/c",
            "--gin.INFER_OUTPUT_DIR=/i",
            "--gin.MIXTURE_OR_TASK_NAME=t",
            "--gin.TASK_FEATURE_LENGTHS={'inputs': 8, 'targets': 8}",
        ],
    ),
    "demo": ("train", ["--gin_file=examples/demo_en_de.gin", "--gin.MODEL_DIR=/tmp/m"]),
    "classify_sentiment": (
        "train",
        ["--gin_file=examples/classify_sentiment/classify_sentiment.gin", "--gin.MODEL_DIR=/tmp/m"],
    ),
    "classify_sentiment pretrain": (
        "train",
        ["--gin_file=examples/classify_sentiment/pretrain.gin", "--gin.MODEL_DIR=/tmp/m"],
    ),
    "classify_sentiment eval": (
        "eval",
        [
            "--gin_file=runs/eval.gin",
            "--gin_file=examples/classify_sentiment/model.gin",
            "--gin.MIXTURE_OR_TASK_NAME=classify_sentiment",
            "--gin.CHECKPOINT_PATH=/c",
            "--gin.EVAL_OUTPUT_DIR=/e",
            "--gin.EVAL_SPLIT='test'",
            "--gin.TASK_FEATURE_LENGTHS={'inputs': 64, 'targets': 2}",
        ],
    ),
    "evaluate_infer_convert eval": (
        "eval",
        [
            "--gin_file=runs/eval.gin",
            "--gin_file=examples/evaluate_infer_convert/en_de.gin",
            "--gin.CHECKPOINT_PATH=/c",
            "--gin.EVAL_OUTPUT_DIR=/e",
        ],
    ),
    "evaluate_infer_convert infer": (
        "infer",
        [
            "--gin_file=runs/infer.gin",
            "--gin_file=examples/evaluate_infer_convert/en_de.gin",
            "--gin.CHECKPOINT_PATH=/c",
            "--gin.INFER_OUTPUT_DIR=/i",
            "--gin.infer.mode=score",
        ],
    ),
    "finetune_en_de pretrain": (
        "train",
        ["--gin_file=examples/finetune_en_de/pretrain.gin", "--gin.MODEL_DIR=/tmp/m"],
    ),
    "finetune_en_de": (
        "train",
        [
            "--gin_file=examples/finetune_en_de/finetune.gin",
            "--gin.MODEL_DIR=/tmp/m",
            "--gin.INITIAL_CHECKPOINT_PATH=None",
        ],
    ),
    "multitask_t0": ("train", ["--gin_file=examples/multitask_t0/t0.gin", "--gin.MODEL_DIR=/m"]),
    "pretrain_romanian": (
        "train",
        ["--gin_file=examples/pretrain_romanian/pretrain.gin", "--gin.MODEL_DIR=/tmp/m"],
    ),
    "T5X from scratch": (
        "train",
        [*T5X, f"--gin_file={T5X_EXAMPLES}/base_wmt_from_scratch.gin", "--gin.MODEL_DIR=/tmp/m"],
    ),
    "T5X test train": (
        "train",
        [*T5X, f"--gin_file={T5X_EXAMPLES}/test_train_t5_tiny.gin", "--gin.MODEL_DIR=/tmp/m"],
    ),
    "T5X eval": (
        "eval",
        [
            *T5X,
            "--gin_file=t5x/examples/t5/t5_1_1/small.gin",
            "--gin_file=t5x/configs/runs/eval.gin",
            "--gin.DROPOUT_RATE=0.0",
            "--gin.CHECKPOINT_PATH=/c",
            "--gin.EVAL_OUTPUT_DIR=/e",
        ],
    ),
    "T5X infer": (
        "infer",
        [
            *T5X,
            f"--gin_file={T5X_EXAMPLES}/base_wmt_infer.gin",
            "--gin.CHECKPOINT_PATH=/c",
            "--gin.INFER_OUTPUT_DIR=/i",
        ],
    ),
    **{
        f"{path.parent.name}/{path.name} finetune": (
            "train",
            [
                f"--gin_file=models/{path.parent.name}/{path.name}",
                "--gin_file=runs/finetune.gin",
                *TRAIN,
                "--gin.INITIAL_CHECKPOINT_PATH=None",
            ],
        )
        for path in sorted((REPO / "t5forge/configs/models").glob("*/*.gin"))
    },
}


@pytest.fixture(autouse=True)
def _clean_gin(monkeypatch, tiny_vocab):
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("T5FORGE_VOCAB", str(tiny_vocab))
    gin.clear_config()
    yield
    gin.clear_config()


@pytest.mark.parametrize("name", sorted(STOCK))
def test_stock_configs_have_no_unused_or_wrong_binding(name, capsys):
    command, flags = STOCK[name]
    if name.startswith("T5X") and not T5X_GIN.is_dir():
        pytest.skip(f"T5X's gin files not found at {T5X_GIN}")
    assert run_flags.configure_run(flags, "", command)
    reported = [
        line
        for line in capsys.readouterr().err.splitlines()
        if "not used by" in line or line.startswith("error:")
    ]
    assert not reported


def _configure(*flags, command="train", strict=False):
    base = [SMALL, "--gin_file=runs/pretrain.gin", *TRAIN, *(["--gin_strict"] if strict else [])]
    return run_flags.configure_run([*base, *flags], "", command)


@pytest.mark.parametrize(
    "flag, expected",
    [
        (
            "--gin.TASK_FEATURE_LENGTHS='abc'",
            "--gin.TASK_FEATURE_LENGTHS='abc': TASK_FEATURE_LENGTHS "
            "must be a dict of feature name -> length >= 1",
        ),
        ("--gin.TASK_FEATURE_LENGTHS={'inputs': 0}", "length >= 1"),
        ("--gin.TASK_FEATURE_LENGTHS={'inputs': 'x'}", "must be a dict"),
        (
            "--gin.BATCH_SIZE=eight",
            "BATCH_SIZE must be an int >= 1 (it fills train/DatasetConfig.batch_size), not 'eight'",
        ),
        ("--gin.BATCH_SIZE=True", "BATCH_SIZE must be an int >= 1"),
        ("--gin.train.eval_steps=2.5", "train.eval_steps must be an int >= 1, not 2.5"),
        ("--gin.T5Config.emb_dim=0", "T5Config.emb_dim must be an int >= 1, not 0"),
        ("--gin.T5Config.scan_layers=1", "T5Config.scan_layers must be True or False, not 1"),
        ("--gin.utils.SaveCheckpointConfig.keep=None", None),
        ("--gin.utils.create_learning_rate_scheduler.base_learning_rate=1", None),
    ],
)
def test_a_value_is_checked_against_the_parameter_it_fills(flag, expected):
    if expected is None:
        assert _configure(flag)
        return
    with pytest.raises(ConfigError) as error:
        _configure(flag)
    assert expected in str(error.value)


def test_a_wrong_value_in_a_gin_file_names_file_and_line(tmp_path):
    (tmp_path / "mine.gin").write_text("# mine\nBATCH_SIZE = 'eight'\n")
    with pytest.raises(ConfigError, match=r"mine\.gin:2: BATCH_SIZE = 'eight': BATCH_SIZE must"):
        run_flags.configure_run(
            [SMALL, "--gin_file=runs/pretrain.gin", *TRAIN, f"--gin_file={tmp_path / 'mine.gin'}"],
            "",
            "train",
        )


@pytest.mark.parametrize(
    "text, line, reason",
    [
        (
            "A = 1\n\n# the lengths\nTASK_FEATURE_LENGTHS = {\n  'inputs': 8,\n",
            4,
            "EOF in multi-line statement",
        ),
        ("TASK_FEATURE_LENGTHS = {'inputs': 8\nBATCH_SIZE = 4\n", 1, "Expected ',' or '}'."),
        ("BATCH_SIZE = eight\n", 1, "Failed to parse token 'eight'"),
        ("A = 1\nB = [1,, 2]\n", 2, "Unable to parse value."),
    ],
)
def test_a_malformed_statement_is_named_by_the_line_it_starts_on(tmp_path, text, line, reason):
    path = tmp_path / "bad.gin"
    path.write_text(text)
    with pytest.raises(ConfigError) as error:
        gin_syntax.check_files([str(path)])
    assert str(error.value).startswith(f"{path}:{line}: `") and f"({reason})" in str(error.value)


def test_a_malformed_flag_is_named_alone_and_a_good_one_passes():
    gin_syntax.check_flags(["A = {'inputs': 8}", "B = @x()", "C = %D"])
    with pytest.raises(ConfigError, match=r"^--gin.A=\{'inputs': 8: malformed gin value"):
        gin_syntax.check_flags(["A = {'inputs': 8", "B = 1"])


def test_an_unused_binding_warns_and_strict_refuses_it(capsys):
    assert _configure("--gin.BATCH_SIZ=8", "--gin.infer.mode='score'")
    warnings = [line for line in capsys.readouterr().err.splitlines() if "not used by" in line]
    assert warnings == [
        f"warning: {flag}: not used by `t5forge train` (no configurable it calls "
        "reads it); remove it or fix its name"
        for flag in ("--gin.BATCH_SIZ=8", "--gin.infer.mode='score'")
    ]
    gin.clear_config()
    with pytest.raises(ConfigError, match=r"--gin.BATCH_SIZ=8: not used .* \(--gin_strict\)"):
        _configure("--gin.BATCH_SIZ=8", strict=True)


def test_bindings_switched_off_by_another_are_not_reported(capsys):
    assert _configure(
        "--gin.train.train_eval_dataset_cfg=None",
        "--gin.train_eval/utils.DatasetConfig.batch_size=4",
    )
    assert "not used by" not in capsys.readouterr().err


def test_annotations_decide_what_fits():
    assert binding_types.requirement(DatasetConfig, "task_feature_lengths", None) is None
    assert binding_types.requirement(DatasetConfig, "task_feature_lengths", {"inputs": 8}) is None
    assert binding_types.requirement(DatasetConfig, "split", 3) == "a string"
    assert binding_types.requirement(DatasetConfig, "seed", "x") == "an int or None"
