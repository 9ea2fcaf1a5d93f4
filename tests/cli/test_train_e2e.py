"""The real `t5forge train` on real data (the bundled en_de_lohelp slice), as a user runs it.

One tiny T5 is trained through the CLI in a subprocess; a second run is killed with SIGKILL
between checkpoints and restarted, and its per-step losses must equal the uninterrupted run's
bit for bit.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]

# Added to the shared tiny model: the T5 1.1 layout (gated GELU, untied logits) and dropout
# from the DROPOUT_RATE macro the commands set.
E2E_GIN = """
T5Config.mlp_activations = ('gelu', 'linear')
T5Config.dropout_rate = %DROPOUT_RATE
T5Config.logits_via_embedding = False
"""


@pytest.fixture(scope="module")
def workdir(tmp_path_factory, tiny_model_gin, tiny_vocab):
    root = tmp_path_factory.mktemp("train_e2e")
    shutil.copy(tiny_vocab, root / "spm.model")
    (root / "tiny.gin").write_text(tiny_model_gin.read_text() + E2E_GIN)
    return root


def _train_command(workdir, model_dir, steps, extra=()):
    return [
        sys.executable,
        "-m",
        "t5forge",
        "train",
        f"--gin_file={workdir / 'tiny.gin'}",
        "--gin_file=runs/finetune.gin",
        f"--gin.MODEL_DIR={model_dir}",
        "--gin.MIXTURE_OR_TASK_NAME=en_de_lohelp_translate",
        "--gin.TASK_FEATURE_LENGTHS={'inputs': 32, 'targets': 32}",
        f"--gin.TRAIN_STEPS={steps}",
        "--gin.BATCH_SIZE=8",
        "--gin.INITIAL_CHECKPOINT_PATH=None",
        "--gin.DROPOUT_RATE=0.1",
        "--gin.utils.create_learning_rate_scheduler.base_learning_rate=0.01",
        *extra,
    ]


def _env(workdir):
    env = dict(os.environ)
    env.update(
        T5FORGE_VOCAB=str(workdir / "spm.model"),
        T5FORGE_DATA_DIR=str(REPO / "t5forge" / "tasks" / "data"),
        JAX_PLATFORMS="cpu",
        PYTHONUNBUFFERED="1",
    )
    return env


def _losses(model_dir, split="train", key="loss") -> dict[int, float]:
    """Last logged value per step (a restarted run logs some steps twice)."""
    losses = {}
    for line in (Path(model_dir) / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        if record["split"] == split:
            losses[record["step"]] = record[key]
    return losses


@pytest.fixture(scope="module")
def trained(workdir):
    """A 200-step run through `python -m t5forge train` (the model dir the other tests read)."""
    model_dir = workdir / "run"
    result = subprocess.run(
        _train_command(
            workdir,
            model_dir,
            200,
            [
                "--gin.EVAL_PERIOD=100",
                "--gin.CHECKPOINT_PERIOD=100",
                "--gin.train.stats_period=20",
                "--gin.train.infer_eval_dataset_cfg=None",
            ],
        ),
        cwd=REPO,
        env=_env(workdir),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return model_dir


@pytest.mark.slow
def test_train_leaves_t5x_model_dir_and_loss_falls(trained):
    model_dir = trained
    for name in (
        "config.gin",
        "model-info.txt",
        "metrics.jsonl",
        "training_curves.png",
        "checkpoint_100",
        "checkpoint_200",
        "spiece.model",
    ):
        assert (model_dir / name).exists(), name
    assert list((model_dir / "train").glob("events.out.tfevents.*"))
    assert list(
        (model_dir / "training_eval" / "en_de_lohelp_translate").glob("events.out.tfevents.*")
    )
    assert "Total number of parameters:" in (model_dir / "model-info.txt").read_text()
    per_token = _losses(model_dir, key="loss_per_nonpadding_target_token")
    assert per_token[200] < 0.85 * per_token[20], per_token
    eval_loss = _losses(model_dir, split="training_eval/en_de_lohelp_translate")
    assert eval_loss[200] < eval_loss[100], eval_loss


@pytest.mark.slow
def test_sigkill_between_checkpoints_then_restart_is_bitwise_identical(workdir):
    flags = [
        "--gin.EVAL_PERIOD=0",
        "--gin.CHECKPOINT_PERIOD=10",
        "--gin.train.stats_period=1",
        "--gin.train.infer_eval_dataset_cfg=None",
        "--gin.train.train_eval_dataset_cfg=None",
        "--gin.utils.SaveCheckpointConfig.async_save=False",
    ]
    straight = workdir / "straight"
    subprocess.run(
        _train_command(workdir, straight, 30, flags),
        cwd=REPO,
        env=_env(workdir),
        check=True,
        capture_output=True,
        timeout=600,
    )

    killed = workdir / "killed"
    process = subprocess.Popen(
        _train_command(workdir, killed, 30, flags),
        cwd=REPO,
        env=_env(workdir),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 600
    while not (killed / "checkpoint_10").exists() and time.time() < deadline:
        assert process.poll() is None, "the run ended before checkpoint_10"
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert not (killed / "checkpoint_30").exists()
    restart = subprocess.run(
        _train_command(workdir, killed, 30, flags),
        cwd=REPO,
        env=_env(workdir),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert restart.returncode == 0, restart.stderr[-3000:]
    assert "resumed from" in restart.stderr

    expected, got = _losses(straight), _losses(killed)
    assert sorted(got) == list(range(1, 31))
    assert got == expected


def _run_cli(workdir, *args):
    result = subprocess.run(
        [sys.executable, "-m", "t5forge", *args],
        cwd=REPO,
        env=_env(workdir),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result


@pytest.mark.slow
def test_eval_and_infer_on_the_checkpoint(workdir, trained):
    common = [
        f"--gin_file={workdir / 'tiny.gin'}",
        "--gin.DROPOUT_RATE=0.0",
        f"--gin.CHECKPOINT_PATH={trained / 'checkpoint_200'}",
        "--gin.MIXTURE_OR_TASK_NAME=en_de_lohelp_translate",
        "--gin.TASK_FEATURE_LENGTHS={'inputs': 32, 'targets': 32}",
        "--gin.BATCH_SIZE=100",
    ]
    eval_dir, infer_dir = workdir / "eval", workdir / "infer"
    _run_cli(
        workdir, "eval", "--gin_file=runs/eval.gin", f"--gin.EVAL_OUTPUT_DIR={eval_dir}", *common
    )
    metrics = json.loads(
        (eval_dir / "en_de_lohelp_translate-metrics.jsonl").read_text().splitlines()[-1]
    )
    assert metrics["step"] == 200 and 0.0 <= metrics["metrics"]["bleu"] <= 100.0
    rows = (eval_dir / "en_de_lohelp_translate-predictions.jsonl").read_text().splitlines()
    assert len(rows) == 400 and {"inputs", "targets", "prediction"} <= set(json.loads(rows[0]))

    _run_cli(
        workdir,
        "infer",
        "--gin_file=runs/infer.gin",
        f"--gin.INFER_OUTPUT_DIR={infer_dir}",
        "--gin.infer.checkpoint_period=1",
        *common,
    )
    rows = [
        json.loads(r)
        for r in (infer_dir / "en_de_lohelp_translate-predict.jsonl").read_text().splitlines()
    ]
    assert len(rows) == 400
    assert rows[0]["inputs"].startswith("translate English to German:")
    assert not list(infer_dir.glob(".*progress*"))


@pytest.mark.slow
def test_convert_to_hf_gives_the_same_logits_in_transformers(workdir, trained):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    import numpy as np

    import t5forge

    hf_dir = workdir / "hf"
    _run_cli(
        workdir,
        "convert",
        "--from",
        "t5forge",
        "--to",
        "hf",
        "--input",
        str(trained / "checkpoint_200"),
        "--output",
        str(hf_dir),
    )
    ours = t5forge.load(trained / "checkpoint_200")
    hf = transformers.T5ForConditionalGeneration.from_pretrained(hf_dir).eval()
    inputs = np.array([[5, 6, 7, 1, 0], [8, 9, 1, 0, 0]])
    decoder = np.array([[0, 11, 12], [0, 13, 0]])
    with torch.no_grad():
        expected = hf(
            input_ids=torch.tensor(inputs),
            attention_mask=torch.tensor(inputs > 0),
            decoder_input_ids=torch.tensor(decoder),
        ).logits.numpy()
    np.testing.assert_allclose(ours.logits(inputs, decoder), expected, atol=1e-4)


@pytest.mark.slow
def test_non_finite_loss_stops_with_the_last_good_state_saved(workdir):
    model_dir = workdir / "diverged"
    flags = [
        "--gin.EVAL_PERIOD=0",
        "--gin.CHECKPOINT_PERIOD=1000",
        "--gin.train.stats_period=5",
        "--gin.train.infer_eval_dataset_cfg=None",
        "--gin.train.train_eval_dataset_cfg=None",
        "--gin.train.optimizer=@optimizers.adamw",
        "--gin.utils.create_learning_rate_scheduler.base_learning_rate=1e30",
    ]
    result = subprocess.run(
        _train_command(workdir, model_dir, 30, flags),
        cwd=REPO,
        env=_env(workdir),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 2, result.stderr[-2000:]
    message = result.stderr.strip().splitlines()[-1]
    assert message.startswith("error: step ") and "non-finite loss" in message
    assert "last good state" in message
    saved = sorted(model_dir.glob("checkpoint_*"))
    assert len(saved) == 1
    # Steps run ahead of the check (stats every 5) were refused too: the step before the first
    # bad one is what was saved.
    bad_step = int(re.match(r"error: step (\d+) ", message).group(1))
    assert saved[0].name == f"checkpoint_{bad_step - 1}"
    import t5forge

    logits = t5forge.load(saved[0]).logits([[5, 6, 1]], [[0, 7]])
    assert np.isfinite(logits).all()


@pytest.mark.slow
def test_sigterm_saves_a_checkpoint_and_exits_143(workdir):
    model_dir = workdir / "preempted"
    flags = [
        "--gin.EVAL_PERIOD=0",
        "--gin.CHECKPOINT_PERIOD=100000",
        "--gin.train.stats_period=1",
        "--gin.train.infer_eval_dataset_cfg=None",
        "--gin.train.train_eval_dataset_cfg=None",
    ]
    process = subprocess.Popen(
        _train_command(workdir, model_dir, 100000, flags),
        cwd=REPO,
        env=_env(workdir),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 600
    metrics = model_dir / "metrics.jsonl"
    while time.time() < deadline and not (
        metrics.exists() and len(metrics.read_text().splitlines()) >= 3
    ):
        assert process.poll() is None, process.communicate()[1][-2000:]
        time.sleep(0.1)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=300)
    assert process.returncode == 143, stderr[-2000:]  # preempted and saved, not finished
    assert "SIGTERM: saving step" in stderr
    saved = [int(p.name.split("_")[1]) for p in model_dir.glob("checkpoint_*")]
    assert len(saved) == 1 and saved[0] == max(_losses(model_dir)) >= 3
