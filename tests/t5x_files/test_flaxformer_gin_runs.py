"""Flaxformer's model files run for real with T5X's run files, from
--gin_search_paths=../shared/flaxformer_gin,../shared/t5x_gin, at tiny sizes given as the
model files' own macros (`--gin.EMBED_DIM=32`, ...): T5 1.1 trains from scratch, and that
checkpoint is evaluated and inferred with runs/eval.gin and runs/infer.gin; T5 1.0 (logits
through the shared embedding), ByT5, mT5 and the chunked-attention overlay train. Each other
T5 size builds its preset's T5Config (test_flaxformer_gin_walk.py), so at tiny sizes it is one
of these networks. LongT5's and the MoE files (with contrib/moe's run files) run the same way
where t5forge builds their feature (transient-global LongT5 unpacked: it refuses packing),
and are skipped, naming the feature, where it does not.
"""

from __future__ import annotations

import json

import pytest
from flaxformer_gin_commands import CONFIGS, FLAXFORMER_GIN, argv
from t5x_gin_commands import MOE_MODEL

from t5forge.gin_config.t5x_compat.flaxformer_names import LONGT5, MOE
from t5forge.gin_config.t5x_compat.translate import missing_parameters

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not FLAXFORMER_GIN.is_dir(), reason=f"Flaxformer's gin files not found at {FLAXFORMER_GIN}"
    ),
]
MODELS = f"{CONFIGS}/t5/models"
VALIDATION = [
    "--gin.utils.DatasetConfig.split='validation'",
    "--gin.utils.DatasetConfig.batch_size=200",
]
# LongT5's transient-global attention refuses packed inputs (its global blocks would restart
# at every segment); T5X's pretrain.gin packs, so the user turns packing off.
UNPACKED = [f"--gin.{split}/utils.DatasetConfig.pack=False" for split in ("train", "train_eval")]
BRIEF_TRAINING = ["--gin.train.infer_eval_dataset_cfg=None", "--gin.train.eval_steps=1"]


def _run(tiny_runs, path, out, *extra, run_file=None):
    command, args = argv(path, out, run_file)
    if command == "train":
        args += BRIEF_TRAINING
    result = tiny_runs.run(command, *args, *extra, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    return result


def _train_steps(model_dir):
    rows = [json.loads(line) for line in (model_dir / "metrics.jsonl").read_text().splitlines()]
    return sorted({row["step"] for row in rows if row["split"] == "train"})


def _trains(tiny_runs, path, out, *extra):
    model_dir = out / "initial"
    _run(tiny_runs, path, out, f"--gin.MODEL_DIR={model_dir}", *extra)
    assert _train_steps(model_dir)[-1] == 2 and (model_dir / "checkpoint_2").is_dir()


def _evaluates_and_infers(tiny_runs, path, out, runs):
    _run(tiny_runs, path, out, *VALIDATION, run_file=f"{runs}/eval.gin")
    assert list((out / "eval").rglob("*.jsonl"))
    _run(tiny_runs, path, out, *VALIDATION, run_file=f"{runs}/infer.gin")
    (predictions,) = (out / "infer").glob("*-predict.jsonl")
    assert len(predictions.read_text().splitlines()) == 400  # the whole validation split


def test_t5_1_1_trains_evaluates_and_infers(tiny_runs, tmp_path):
    path = f"{MODELS}/t5_1_1_small.gin"
    _trains(tiny_runs, path, tmp_path)
    config = (tmp_path / "initial" / "config.gin").read_text()
    assert "T5Config.num_heads = %NUM_HEADS" in config and "NUM_HEADS = 4" in config
    _evaluates_and_infers(tiny_runs, path, tmp_path, "t5x/configs/runs")


@pytest.mark.parametrize(
    "path",
    [
        f"{MODELS}/t5_small.gin",  # T5 1.0: ReLU, logits through the shared embedding
        f"{MODELS}/byt5_small.gin",
        f"{MODELS}/mt5_small.gin",
        f"{CONFIGS}/t5/architectures/flash_attention.gin",  # after t5_1_1_base.gin
    ],
)
def test_trains_two_steps(tiny_runs, path, tmp_path):
    _trains(tiny_runs, path, tmp_path)


def _needs(feature):
    missing = missing_parameters(feature)
    return pytest.mark.skipif(bool(missing), reason=f"needs {feature} ({', '.join(missing)})")


@pytest.mark.parametrize(
    "path",
    [
        pytest.param(f"{CONFIGS}/longt5/models/{stem}.gin", marks=_needs(LONGT5))
        for stem in ("longt5_1_1_base", "longt5_1_1_transient_global_base")
    ]
    + [
        pytest.param(f"{CONFIGS}/moe/models/{stem}.gin", marks=_needs(MOE))
        for stem in ("experts_choose_tiny", "st_moe_base", "switch_base")
    ],
)
def test_feature_files_train_two_steps(tiny_runs, path, tmp_path):
    extra = UNPACKED if "transient_global" in path else []
    _trains(tiny_runs, path, tmp_path, *extra)


@_needs(MOE)
def test_moe_trains_evaluates_and_infers_with_contrib_moe_runs(tiny_runs, tmp_path):
    _trains(tiny_runs, MOE_MODEL, tmp_path)
    _evaluates_and_infers(tiny_runs, MOE_MODEL, tmp_path, "t5x/contrib/moe/configs/runs")


@_needs(MOE)
def test_sparse_upcycling_starts_experts_from_a_dense_checkpoint(tiny_runs, tmp_path):
    """contrib/moe's sparse_upcycle.gin: a dense T5 1.1 checkpoint (INITIAL_CHECKPOINT_PATH)
    starts the MoE model, every expert from its layer's MLP, the routers fresh."""
    _trains(tiny_runs, f"{MODELS}/t5_1_1_base.gin", tmp_path)
    model_dir = tmp_path / "sparse"
    result = _run(
        tiny_runs,
        MOE_MODEL,
        tmp_path,
        f"--gin.MODEL_DIR={model_dir}",
        "--gin.TRAIN_STEPS=4",
        run_file="t5x/contrib/moe/configs/runs/sparse_upcycle.gin",
    )
    assert "kept 2 freshly initialised" in result.stderr and "router" in result.stderr
    assert _train_steps(model_dir)[-1] == 4
