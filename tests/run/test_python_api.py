"""train / evaluate / infer called from Python, without gin: the library layer the CLI calls.

A tiny T5 is trained in-process on the bundled en-de slice with a hook and early stopping,
fine-tuned from that checkpoint, evaluated and run for inference, all through `t5forge.*`.
"""

import json

import pytest
from tiny_model import TINY_CONFIG

import t5forge
from t5forge.errors import ConfigError
from t5forge.run import (
    DatasetConfig,
    EarlyStopping,
    Every,
    Hook,
    RestoreCheckpointConfig,
    SaveCheckpointConfig,
)

TASK = "en_de_lohelp_translate"
LENGTHS = {"inputs": 24, "targets": 24}


@pytest.fixture(autouse=True)
def builtin_vocabulary(monkeypatch, tiny_vocab):
    monkeypatch.setenv("T5FORGE_VOCAB", str(tiny_vocab))


def _data(split="train", batch_size=8) -> DatasetConfig:
    return DatasetConfig(TASK, LENGTHS, split, batch_size, shuffle=split == "train")


class _Recorder(Hook):
    every = 2

    def __init__(self):
        self.calls = []

    def on_start(self, run):
        self.calls.append(("start", int(run.state.step)))

    def on_step(self, run, step):
        self.calls.append(("step", step))

    def on_metrics(self, run, step, metrics):
        self.calls.append(("metrics", step, "loss" in metrics))

    def on_eval(self, run, step, results):
        self.calls.append(("eval", step, sorted(results)))

    def on_end(self, run, step):
        self.calls.append(("end", step))


@pytest.fixture(scope="module")
def first_run(tmp_path_factory, tiny_vocab):
    """8 steps from scratch, teacher-forced eval every 4 steps, stopped early by a hook."""
    mp = pytest.MonkeyPatch()
    mp.setenv("T5FORGE_VOCAB", str(tiny_vocab))
    model_dir = tmp_path_factory.mktemp("python_api") / "run"
    recorder = _Recorder()
    calls = []
    # min_delta is huge, so the second evaluation counts as no improvement and stops the run.
    stopper = EarlyStopping(f"training_eval/{TASK}/loss", mode="min", patience=1, min_delta=1e9)
    result = t5forge.train(
        model=TINY_CONFIG,
        model_dir=model_dir,
        total_steps=12,
        train_dataset_cfg=_data(),
        train_eval_dataset_cfg=_data("validation"),
        eval_period=4,
        eval_steps=2,
        stats_period=2,
        checkpoint_cfg=SaveCheckpointConfig(period=4, async_save=False),
        hooks=[recorder, stopper, Every(3, lambda run, step: calls.append(step))],
        progress=False,
    )
    mp.undo()
    return model_dir, result, recorder.calls, calls


def test_python_train_runs_hooks_and_stops_early(first_run):
    model_dir, result, recorded, every_three = first_run
    assert recorded[0] == ("start", 0)
    assert [c[1] for c in recorded if c[0] == "step"] == [2, 4, 6, 8]
    assert [c[1] for c in recorded if c[0] == "eval"] == [4, 8]
    assert all(c[2] for c in recorded if c[0] == "metrics")
    assert recorded[-1] == ("end", 8)
    assert every_three == [3, 6]
    # Stopped at step 8 of 12, with that step saved and its results returned.
    assert sorted(p.name for p in model_dir.glob("checkpoint_*")) == [
        "checkpoint_4",
        "checkpoint_8",
    ]
    assert result[f"training_eval/{TASK}/loss"] > 0 and result["loss"] > 0
    rows = [json.loads(line) for line in (model_dir / "metrics.jsonl").read_text().splitlines()]
    assert max(r["step"] for r in rows) == 8


def test_python_fine_tune_evaluate_and_infer_from_a_checkpoint(first_run, tmp_path):
    model_dir, *_ = first_run
    tuned = tmp_path / "tuned"
    t5forge.train(
        model=TINY_CONFIG,
        model_dir=tuned,
        total_steps=2,
        train_dataset_cfg=_data(),
        restore_checkpoint_cfg=RestoreCheckpointConfig(path=str(model_dir / "checkpoint_8")),
        checkpoint_cfg=SaveCheckpointConfig(period=2, async_save=False),
        optimizer="adamw",
        learning_rate_fn=1e-3,
        eval_period=0,
        progress=False,
    )
    assert (tuned / "checkpoint_2").is_dir()

    scores = tmp_path / "scores"
    written = t5forge.infer(
        model=TINY_CONFIG,
        dataset_cfg=_data("validation", 64),
        restore_checkpoint_cfg=RestoreCheckpointConfig(path=str(tuned)),
        output_dir=scores,
        mode="score",
    )
    from t5forge.data import get_mixture_or_task

    assert written == {TASK: get_mixture_or_task(TASK).num_input_examples("validation")}
    first = json.loads((scores / f"{TASK}-score.jsonl").read_text().splitlines()[0])
    # Inputs come back decoded with the tiny test vocabulary, which has no capitals.
    assert first["score"] < 0 and first["inputs"].startswith("translate ")

    results = t5forge.evaluate(
        model=TINY_CONFIG,
        dataset_cfg=_data("validation", 64),
        output_dir=tmp_path / "eval",
        restore_checkpoint_cfg=RestoreCheckpointConfig(path=str(tuned), mode="latest"),
        max_decode_length=8,
    )
    assert list(results) == [2]
    assert 0 <= results[2][f"inference_eval/{TASK}"]["bleu"] <= 100


def test_model_argument_is_checked():
    with pytest.raises(ConfigError, match="unknown model config 't5_1_1/smal'"):
        t5forge.train(
            model="t5_1_1/smal", model_dir="/nonexistent", total_steps=1, train_dataset_cfg=_data()
        )
    with pytest.raises(ConfigError, match="model must be a t5forge model"):
        t5forge.evaluate(
            model=None,
            dataset_cfg=_data(),
            output_dir="/nonexistent",
            restore_checkpoint_cfg=RestoreCheckpointConfig(path="x"),
        )


def test_mfu_is_logged_where_the_device_peak_is_known(monkeypatch, tmp_path):
    # No CPU has a peak FLOP/s, so pretend this one is an accelerator with a known peak.
    from t5forge.training import flops

    peak = 1e12
    monkeypatch.setattr(flops, "local_peak_flops", lambda dtype: peak)
    metrics = t5forge.train(
        model=TINY_CONFIG,
        model_dir=tmp_path / "run",
        total_steps=2,
        train_dataset_cfg=_data(),
        stats_period=2,
        eval_period=0,
        checkpoint_cfg=SaveCheckpointConfig(period=2, async_save=False),
        progress=False,
    )
    step_flops = flops.model_flops_per_step(TINY_CONFIG, 8, LENGTHS["inputs"], LENGTHS["targets"])
    seconds_per_step = 1 / metrics["timing/steps_per_second"]
    assert metrics["timing/mfu"] == pytest.approx(step_flops / (seconds_per_step * peak))
