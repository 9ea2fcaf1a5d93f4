"""T5X's README commands and one file of each architecture and run kind, run for real from
--gin_search_paths=../shared/t5x_gin with a T5X user's command-line overrides only.

The seed examples train from scratch, fine-tune that checkpoint (TRAIN_STEPS_RELATIVE),
evaluate and infer it; infer_from_tfexample_file.gin infers it over TFRecord files of
tf.Examples written by TensorFlow. test_train_t5_tiny.gin, the scanned-layers network, the
optax AdamW example (with a 1-step warm-up: its cosine decay lasts TRAIN_STEPS), the
decoder-only WMT example and the GPU network's AdamW overlay (scale_attn_logits = True, as 7
of T5X's GPU examples) train too; precompile.gin compiles the train step and exits.
T5X's WMT task is T5's TensorFlow task: the built-in
en_de_lohelp_translate stands in for it (MIXTURE_OR_TASK_NAME), and its validation split for
WMT's test split. Training evaluates one batch and runs no inference evaluation; eval and
infer decode the 400 examples in two batches. test_train_t5_tiny.gin binds
num_partitions = 2, as the WMT examples do: every command gets two host CPU devices. One compilation cache for all
(tests/conftest.py), 2 steps of the tiny network each.
"""

from __future__ import annotations

import base64
import json

import pytest
from commands import xla_flags
from t5x_gin_commands import T5X_GIN, TFEXAMPLE_DIR, argv

from t5forge.data import SentencePieceVocabulary

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not T5X_GIN.is_dir(), reason=f"T5X's gin files not found at {T5X_GIN}"),
]
EXAMPLES = "t5x/examples/t5/t5_1_1/examples"
TWO_DEVICES = {"XLA_FLAGS": xla_flags(2)}
VALIDATION = [
    "--gin.utils.DatasetConfig.split='validation'",
    "--gin.utils.DatasetConfig.batch_size=200",
]
# The GPU network's AdamW overlay, as its 7 example files include it: scale_attn_logits = True.
GPU_SCALED_ATTENTION = "t5x/contrib/gpu/t5/t5_1_1/adamw_opt.gin"
BRIEF_TRAINING = ["--gin.train.infer_eval_dataset_cfg=None", "--gin.train.eval_steps=1"]


def _run(tiny_runs, path, out, *extra):
    command, args = argv(path, out)
    if command == "train":
        args += BRIEF_TRAINING
    result = tiny_runs.run(command, *args, *extra, env=tiny_runs.env(**TWO_DEVICES), timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    return result


def _train_steps(model_dir):
    rows = [json.loads(line) for line in (model_dir / "metrics.jsonl").read_text().splitlines()]
    return sorted({row["step"] for row in rows if row["split"] == "train"})


@pytest.fixture(scope="module")
def from_scratch(tiny_runs, tmp_path_factory):
    """base_wmt_from_scratch.gin, 2 steps: the checkpoint the other seed commands read."""
    out = tmp_path_factory.mktemp("t5x_seed")
    model_dir = out / "initial"
    _run(tiny_runs, f"{EXAMPLES}/base_wmt_from_scratch.gin", out, f"--gin.MODEL_DIR={model_dir}")
    assert (model_dir / "checkpoint_2").is_dir() and (model_dir / "config.gin").is_file()
    return out


def test_finetune_from_the_checkpoint_for_relative_steps(tiny_runs, from_scratch, tmp_path):
    _run(
        tiny_runs,
        f"{EXAMPLES}/base_wmt_finetune.gin",
        from_scratch,
        f"--gin.MODEL_DIR={tmp_path}",
        "--gin.TRAIN_STEPS_RELATIVE=2",
    )
    assert _train_steps(tmp_path)[-1] == 2 and (tmp_path / "checkpoint_2").is_dir()


def test_eval_and_infer_the_checkpoint(tiny_runs, from_scratch):
    _run(tiny_runs, f"{EXAMPLES}/base_wmt_eval.gin", from_scratch, *VALIDATION)
    assert list((from_scratch / "eval").rglob("*.jsonl"))
    _run(tiny_runs, f"{EXAMPLES}/base_wmt_infer.gin", from_scratch, *VALIDATION)
    (predictions,) = (from_scratch / "infer").glob("*-predict.jsonl")
    assert len(predictions.read_text().splitlines()) == 400  # the whole validation split


def test_precompile_compiles_the_train_step_and_exits(tiny_runs, tmp_path):
    _run(tiny_runs, "t5x/configs/runs/precompile.gin", tmp_path)
    model_dir = tmp_path / "model"
    assert "HloModule" in (model_dir / "train_step.hlo.txt").read_text()
    assert not list(model_dir.glob("checkpoint_*")) and not (model_dir / "metrics.jsonl").exists()


def test_infer_from_tfexample_files(tiny_runs, from_scratch):
    """T5X's infer_from_tfexample_file.gin over the 40 tf.Examples TensorFlow wrote; the
    task tokenizes `inputs` with the model file's vocabulary (here the tiny one)."""
    vocab = f"--gin.seqio.SentencePieceVocabulary.sentencepiece_model_file='{tiny_runs.vocab}'"
    out = from_scratch / "tfexample"
    _run(
        tiny_runs,
        "t5x/configs/runs/infer_from_tfexample_file.gin",
        from_scratch,
        vocab,
        "--gin.utils.DatasetConfig.batch_size=40",
        f"--gin.INFER_OUTPUT_DIR={out}",
    )
    (predictions,) = out.glob("*-predict.jsonl")
    rows = [json.loads(line) for line in predictions.read_text().splitlines()]
    written = json.loads((TFEXAMPLE_DIR.parent / "tfexample_reference.json").read_text())
    reviews = [base64.b64decode(x["inputs"]["bytes"]).decode() for x in written["seqio_train"]]
    vocab = SentencePieceVocabulary(str(tiny_runs.vocab))
    # Each review, in file order, as its first 16 tokens read back.
    assert [row["inputs"] for row in rows] == [vocab.decode(vocab.encode(r)[:16]) for r in reviews]


@pytest.mark.parametrize(
    "path",
    [
        f"{EXAMPLES}/test_train_t5_tiny.gin",  # T5X's README test command: num_partitions = 2
        "t5x/examples/scalable_t5/t5_1_1/small.gin",  # scanned layers, with runs/pretrain.gin
        f"{EXAMPLES}/base_wmt_from_scratch_adamw.gin",  # optax through optimizers.chain
        "t5x/examples/decoder_only/examples/base_wmt_from_scratch.gin",  # a prefix LM
        GPU_SCALED_ATTENTION,
    ],
)
def test_trains_two_steps(tiny_runs, path, tmp_path):
    warm_up = "--gin.optax.warmup_cosine_decay_schedule.warmup_steps=1"
    extra = [warm_up] if path.endswith("_adamw.gin") else []
    _run(tiny_runs, path, tmp_path, f"--gin.MODEL_DIR={tmp_path / 'run'}", *extra)
    assert _train_steps(tmp_path / "run")[-1] == 2
    if path == GPU_SCALED_ATTENTION:
        assert "T5Config.scale_attn_logits = True" in (tmp_path / "run" / "config.gin").read_text()
