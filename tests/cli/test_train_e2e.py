"""The real `t5forge train` on real data (the bundled en_de_lohelp slice), as a user runs it.

One tiny T5 is trained through the CLI in a subprocess; a second run is killed with SIGKILL
between checkpoints and restarted, and its per-step losses must equal the uninterrupted run's
bit for bit. `eval`, `infer` and `convert` read the session's trained tiny run (`tiny_trained`).
"""

import json
import re
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
from commands import TASK


def _losses(model_dir, split="train", key="loss") -> dict[int, float]:
    """Last logged value per step (a restarted run logs some steps twice)."""
    losses = {}
    for line in (Path(model_dir) / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        if record["split"] == split:
            losses[record["step"]] = record[key]
    return losses


@pytest.mark.slow
def test_train_leaves_t5x_model_dir_and_loss_falls(tiny_runs, tmp_path):
    model_dir = tmp_path / "run"
    tiny_runs.train(
        model_dir,
        200,
        "--gin.EVAL_PERIOD=100",
        "--gin.train.stats_period=20",
        "--gin.train.infer_eval_dataset_cfg=None",
        period=100,
        quiet=False,
        timeout=900,
        check=True,
    )
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
def test_sigkill_between_checkpoints_then_restart_is_bitwise_identical(tiny_runs, tmp_path):
    straight = tmp_path / "straight"
    tiny_runs.train(straight, 30, period=10, check=True)

    killed = tmp_path / "killed"
    process = tiny_runs.popen(
        *tiny_runs.train_args(killed, 30, period=10), stderr=subprocess.DEVNULL
    )
    deadline = time.time() + 600
    while not (killed / "checkpoint_10").exists() and time.time() < deadline:
        assert process.poll() is None, "the run ended before checkpoint_10"
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert not (killed / "checkpoint_30").exists()
    restart = tiny_runs.train(killed, 30, period=10, check=True)
    assert "resumed from" in restart.stderr

    expected, got = _losses(straight), _losses(killed)
    assert sorted(got) == list(range(1, 31))
    assert got == expected


@pytest.mark.slow
def test_eval_and_infer_on_the_checkpoint(tiny_runs, tiny_trained, tmp_path):
    common = [
        f"--gin_file={tiny_runs.gin}",
        "--gin.DROPOUT_RATE=0.0",
        f"--gin.CHECKPOINT_PATH={tiny_trained / 'checkpoint_12'}",
        f"--gin.MIXTURE_OR_TASK_NAME={TASK}",
        "--gin.TASK_FEATURE_LENGTHS={'inputs': 32, 'targets': 32}",
        "--gin.BATCH_SIZE=100",
    ]
    eval_dir, infer_dir = tmp_path / "eval", tmp_path / "infer"
    tiny_runs.run(
        "eval", "--gin_file=runs/eval.gin", f"--gin.EVAL_OUTPUT_DIR={eval_dir}", *common, check=True
    )
    metrics = json.loads(
        (eval_dir / "en_de_lohelp_translate-metrics.jsonl").read_text().splitlines()[-1]
    )
    assert metrics["step"] == 12 and 0.0 <= metrics["metrics"]["bleu"] <= 100.0
    rows = (eval_dir / "en_de_lohelp_translate-predictions.jsonl").read_text().splitlines()
    assert len(rows) == 400 and {"inputs", "targets", "prediction"} <= set(json.loads(rows[0]))

    tiny_runs.run(
        "infer",
        "--gin_file=runs/infer.gin",
        f"--gin.INFER_OUTPUT_DIR={infer_dir}",
        "--gin.infer.checkpoint_period=1",
        *common,
        check=True,
    )
    rows = [
        json.loads(r)
        for r in (infer_dir / "en_de_lohelp_translate-predict.jsonl").read_text().splitlines()
    ]
    assert len(rows) == 400
    assert rows[0]["inputs"].startswith("translate English to German:")
    assert not list(infer_dir.glob(".*progress*"))


@pytest.mark.slow
def test_convert_to_hf_gives_the_same_logits_in_transformers(tiny_runs, tiny_trained, tmp_path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    import numpy as np

    import t5forge

    hf_dir = tmp_path / "hf"
    tiny_runs.run(
        "convert",
        "--from",
        "t5forge",
        "--to",
        "hf",
        "--input",
        tiny_trained / "checkpoint_12",
        "--output",
        hf_dir,
        check=True,
    )
    ours = t5forge.load(tiny_trained / "checkpoint_12")
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
def test_non_finite_loss_stops_with_the_last_good_state_saved(tiny_runs, tmp_path):
    model_dir = tmp_path / "diverged"
    result = tiny_runs.train(
        model_dir,
        30,
        "--gin.EVAL_PERIOD=0",
        "--gin.train.stats_period=5",
        "--gin.train.infer_eval_dataset_cfg=None",
        "--gin.train.train_eval_dataset_cfg=None",
        "--gin.train.optimizer=@optimizers.adamw",
        "--gin.utils.create_learning_rate_scheduler.base_learning_rate=1e30",
        period=1000,
        quiet=False,
    )
    assert result.returncode == 2, result.stderr[-2000:]
    message = result.stderr.strip().splitlines()[-1]
    assert message.startswith("error: step ") and "non-finite loss" in message
    assert "last good state" in message
    saved = sorted(model_dir.glob("checkpoint_*"))
    assert len(saved) == 1
    # Steps run ahead of the check (stats every 5) were refused too. The state the bad step
    # started from already gives that non-finite loss, so the one before it is what was saved.
    bad_step = int(re.match(r"error: step (\d+) ", message).group(1))
    assert saved[0].name == f"checkpoint_{bad_step - 2}"
    import t5forge

    logits = t5forge.load(saved[0]).logits([[5, 6, 1]], [[0, 7]])
    assert np.isfinite(logits).all()


@pytest.mark.slow
def test_sigterm_saves_a_checkpoint_and_exits_143(tiny_runs, tmp_path):
    model_dir = tmp_path / "preempted"
    flags = [
        "--gin.EVAL_PERIOD=0",
        "--gin.train.stats_period=1",
        "--gin.train.infer_eval_dataset_cfg=None",
        "--gin.train.train_eval_dataset_cfg=None",
    ]
    process = tiny_runs.popen(
        *tiny_runs.train_args(model_dir, 100000, *flags, period=100000, quiet=False)
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
