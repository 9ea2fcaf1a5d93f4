"""Checkpoints: round trip, keep-N, best-by-metric, async, corrupt/killed saves, partial init."""

import logging
import signal
import subprocess
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from commands import REPO, command_env, python

from t5forge.checkpoints.checkpointer import Checkpointer
from t5forge.checkpoints.step_dir import check_params_match, restore_params
from t5forge.errors import CheckpointError
from t5forge.training.optimizers import adafactor
from t5forge.training.train_state import TrainState

TX = adafactor(0.01, min_dim_size_to_factor=4)


def make_params(seed=0, width=8):
    k1, k2 = jax.random.split(jax.random.PRNGKey(seed))
    return {
        "token_embedder": {"embedding": jax.random.normal(k1, (16, width))},
        "encoder": {
            "layers_0": {"mlp": {"wi": {"kernel": jax.random.normal(k2, (width, 12))}}},
            "encoder_norm": {"scale": jnp.ones((width,))},
        },
    }


def make_state(step, seed=0):
    state = TrainState.create(make_params(seed), TX)
    return state.replace(step=jnp.asarray(step, jnp.int32))


def abstract_state():
    return jax.eval_shape(lambda: make_state(0))


def assert_trees_equal(a, b):
    jax.tree.map(lambda x, y: np.testing.assert_array_equal(np.asarray(x), np.asarray(y)), a, b)


def test_round_trip_with_iterator_state_and_metadata(tmp_path):
    ckpt = Checkpointer(tmp_path, period=1)
    state = make_state(7, seed=3)
    assert ckpt.save(
        7,
        state,
        dataset_state={"next_index": 42, "epoch": 1},
        metadata={"model_config": {"emb_dim": 8}},
    )
    ckpt.wait_until_finished()
    assert (tmp_path / "checkpoint_7" / "state").is_dir()
    restored = Checkpointer(tmp_path).restore_latest(abstract_state())
    assert restored.step == 7 and restored.path == tmp_path / "checkpoint_7"
    assert restored.dataset_state == {"next_index": 42, "epoch": 1}
    assert restored.metadata == {"step": 7, "model_config": {"emb_dim": 8}}
    assert isinstance(restored.state, TrainState)
    assert_trees_equal(restored.state, state)


def test_restore_into_given_shardings(tmp_path):
    ckpt = Checkpointer(tmp_path, period=1, async_save=False)
    ckpt.save(1, make_state(1))
    sharding = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    shardings = jax.tree.map(lambda _: sharding, abstract_state())
    restored = ckpt.restore_latest(abstract_state(), shardings)
    assert restored.state.params["token_embedder"]["embedding"].sharding == sharding


def test_empty_directory_restores_nothing(tmp_path):
    assert Checkpointer(tmp_path).restore_latest(abstract_state()) is None


def test_period_and_keep_last_n(tmp_path):
    ckpt = Checkpointer(tmp_path, keep=2, period=2)
    saved = [step for step in range(1, 8) if ckpt.save(step, make_state(step))]
    assert saved == [2, 4, 6]
    assert ckpt.save(7, make_state(7), force=True)
    ckpt.wait_until_finished()
    assert ckpt.all_steps() == [6, 7]
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("checkpoint_")) == [
        "checkpoint_6",
        "checkpoint_7",
    ]


@pytest.mark.parametrize("mode, best", [("max", 2), ("min", 3)])
def test_keep_best_by_metric(tmp_path, mode, best):
    ckpt = Checkpointer(
        tmp_path, keep=1, period=1, keep_best_metric="training_eval/acc", best_mode=mode
    )
    for step, acc in [(1, 0.5), (2, 0.9), (3, 0.1), (4, 0.6)]:
        ckpt.save(step, make_state(step), metrics={"training_eval/acc": acc})
    ckpt.wait_until_finished()
    assert ckpt.all_steps() == sorted({best, 4})


def test_async_save_returns_before_write_and_survives_donation(tmp_path):
    ckpt = Checkpointer(tmp_path, period=1, async_save=True)
    state = make_state(5, seed=1)
    expected = jax.tree.map(np.asarray, state)
    ckpt.save(5, state)
    # donate (delete) the device buffers right away, as the next train step would
    jax.jit(lambda s: jax.tree.map(lambda x: x + 1, s), donate_argnums=0)(state)
    ckpt.wait_until_finished()
    assert_trees_equal(ckpt.restore_latest(abstract_state()).state, expected)


@pytest.mark.parametrize("damage", ["truncate", "delete_state"])
def test_corrupt_latest_checkpoint_is_skipped_with_warning(tmp_path, caplog, damage):
    ckpt = Checkpointer(tmp_path, period=1, async_save=False)
    ckpt.save(1, make_state(1, seed=1))
    ckpt.save(2, make_state(2, seed=2))
    state_dir = tmp_path / "checkpoint_2" / "state"
    if damage == "truncate":
        for data_file in state_dir.rglob("*"):
            if data_file.is_file() and "/d/" in str(data_file):
                data_file.write_bytes(data_file.read_bytes()[:10])
    else:
        for data_file in state_dir.rglob("*"):
            if data_file.is_file():
                data_file.unlink()
    with caplog.at_level(logging.WARNING, logger="t5forge.checkpoints.checkpointer"):
        restored = Checkpointer(tmp_path).restore_latest(abstract_state())
    assert restored.step == 1
    assert_trees_equal(restored.state, make_state(1, seed=1))
    warnings = [r.getMessage() for r in caplog.records if "skipping" in r.getMessage()]
    assert len(warnings) == 1 and "checkpoint_2" in warnings[0] and "\n" not in warnings[0]


def test_no_readable_checkpoint_is_an_error(tmp_path):
    ckpt = Checkpointer(tmp_path, period=1, async_save=False)
    ckpt.save(1, make_state(1))
    for data_file in (tmp_path / "checkpoint_1" / "state").rglob("*"):
        if data_file.is_file():
            data_file.unlink()
    with pytest.raises(CheckpointError, match="no readable checkpoint .*tried steps \\[1\\]"):
        Checkpointer(tmp_path).restore_latest(abstract_state())


KILLED_SAVE = textwrap.dedent("""
    import os, signal, sys, threading, time
    from pathlib import Path
    import jax.numpy as jnp
    from t5forge.checkpoints.checkpointer import Checkpointer
    model_dir = Path(sys.argv[1])
    ckpt = Checkpointer(model_dir, period=1)
    ckpt.save(1, {"w": jnp.full((1024, 1024), 1.0)})
    ckpt.wait_until_finished()

    def kill_when_writing():
        while not any("tmp" in p.name for p in model_dir.iterdir()):
            time.sleep(0.001)
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=kill_when_writing, daemon=True).start()
    ckpt.save(2, {"w": jnp.full((8, 1024, 1024), 2.0)})
    ckpt.wait_until_finished()
    time.sleep(30)
""")


def _run_script(script: str, model_dir) -> subprocess.CompletedProcess:
    """`script` in a fresh interpreter with `model_dir` as its argument."""
    return python("-c", script, model_dir, env=command_env(PYTHONPATH=REPO), timeout=120)


def test_killed_save_never_yields_a_bad_checkpoint(tmp_path):
    result = _run_script(KILLED_SAVE, tmp_path)
    assert result.returncode == -signal.SIGKILL, result.stderr[-2000:]
    abstract = {"w": jax.ShapeDtypeStruct((1024, 1024), jnp.float32)}
    restored = Checkpointer(tmp_path).restore_latest(abstract)
    assert restored.step == 1
    np.testing.assert_array_equal(restored.state["w"], 1.0)


EXIT_RIGHT_AFTER_OPENING = textwrap.dedent("""
    import sys
    from pathlib import Path
    from t5forge.checkpoints.checkpointer import Checkpointer
    model_dir = Path(sys.argv[1])
    for step in range(300):
        (model_dir / f"checkpoint_{step}.orbax-checkpoint-tmp-{step}").mkdir()
    Checkpointer(model_dir, period=1)
    sys.exit("error: a bad input file, found before the first step")
""")


def test_a_run_stopping_right_after_opening_its_checkpoints_exits_cleanly(tmp_path):
    """Unfinished saves are removed before the constructor returns: a cleanup still running
    in a thread when the interpreter exits printed a traceback under the one-line error."""
    result = _run_script(EXIT_RIGHT_AFTER_OPENING, tmp_path)
    assert result.stderr.strip() == "error: a bad input file, found before the first step"
    assert not list(tmp_path.iterdir())


def test_checkpoint_shape_mismatch_names_the_tensor(tmp_path):
    ckpt = Checkpointer(tmp_path, period=1, async_save=False)
    ckpt.save(3, make_state(3))
    ckpt.check_matches(jax.eval_shape(make_params))
    wider = jax.eval_shape(lambda: make_params(width=10))
    with pytest.raises(
        CheckpointError,
        match=(r"'encoder/encoder_norm/scale' with shape \(8,\) but the model expects \(10,\)"),
    ):
        ckpt.check_matches(wider)
    renamed = {"decoder": jax.eval_shape(make_params)["encoder"]}
    with pytest.raises(CheckpointError, match="has no parameter 'decoder/"):
        check_params_match(tmp_path / "checkpoint_3", renamed)


def test_restore_params_with_assignment_map_reports_what_was_restored(tmp_path):
    ckpt = Checkpointer(tmp_path, period=1, async_save=False)
    source = make_state(9, seed=1)
    ckpt.save(9, source)
    fresh = make_params(seed=2)
    fresh["decoder"] = {"layers_0": {"mlp": {"wi": {"kernel": jnp.zeros((8, 12))}}}}
    fresh["decoder_norm"] = {"scale": jnp.full((8,), 5.0, jnp.bfloat16)}
    assignment_map = [
        (r"decoder/(layers_\d+)/mlp/(.*)", r"encoder/\1/mlp/\2"),
        (r"decoder_norm/scale", r"encoder/encoder_norm/scale"),
        (r"token_embedder/.*", None),
    ]
    params, report = restore_params(tmp_path, fresh, assignment_map)
    src = source.params
    np.testing.assert_array_equal(
        params["decoder"]["layers_0"]["mlp"]["wi"]["kernel"],
        src["encoder"]["layers_0"]["mlp"]["wi"]["kernel"],
    )
    np.testing.assert_array_equal(
        params["encoder"]["layers_0"]["mlp"]["wi"]["kernel"],
        src["encoder"]["layers_0"]["mlp"]["wi"]["kernel"],
    )
    assert params["decoder_norm"]["scale"].dtype == jnp.bfloat16
    np.testing.assert_array_equal(
        params["token_embedder"]["embedding"], fresh["token_embedder"]["embedding"]
    )
    assert report.fresh == ["token_embedder/embedding"]
    assert ("decoder/layers_0/mlp/wi/kernel", "encoder/layers_0/mlp/wi/kernel") in report.restored
    assert len(report.restored) == 4
    assert report.summary().startswith("restored 4 parameters from the checkpoint, kept 1")


def test_restore_params_errors_are_one_line(tmp_path):
    ckpt = Checkpointer(tmp_path, period=1, async_save=False)
    ckpt.save(1, make_state(1))
    extra = make_params()
    extra["logits_dense"] = {"kernel": jnp.zeros((8, 16))}
    hint = r"'logits_dense/kernel' .* add \('logits_dense/kernel', None\)"
    with pytest.raises(CheckpointError, match=hint):
        restore_params(tmp_path / "checkpoint_1", extra)
    with pytest.raises(CheckpointError, match="no t5forge checkpoint at"):
        restore_params(tmp_path / "missing", extra)


def test_restore_latest_rejects_a_different_model_instead_of_skipping(tmp_path):
    ckpt = Checkpointer(tmp_path, period=1, async_save=False)
    ckpt.save(1, make_state(1))
    wider = jax.eval_shape(lambda: TrainState.create(make_params(width=10), TX))
    with pytest.raises(CheckpointError, match="does not match the model"):
        ckpt.restore_latest(wider)


def test_keep_best_survives_saves_without_metrics_and_a_restart(tmp_path):
    """As in training: metrics only at eval steps; keep=1 leaves the best and the latest."""
    ckpt = Checkpointer(tmp_path, keep=1, period=1, keep_best_metric="inference_eval/t/accuracy")
    for step in range(1, 7):
        metrics = {2: 90.0, 4: 30.0}.get(step)
        ckpt.save(
            step,
            make_state(step),
            metrics=None if metrics is None else {"inference_eval/t/accuracy": metrics},
        )
    ckpt.wait_until_finished()
    assert ckpt.all_steps() == [2, 6]
    ckpt.close()
    resumed = Checkpointer(tmp_path, keep=1, period=1, keep_best_metric="inference_eval/t/accuracy")
    resumed.save(7, make_state(7), metrics={"inference_eval/t/accuracy": 50.0})
    resumed.save(8, make_state(8))
    resumed.wait_until_finished()
    assert resumed.all_steps() == [2, 8]
    with pytest.raises(
        CheckpointError,
        match="metric_name_to_monitor 'inference_eval/t/accuracy'"
        " is not among the evaluation metrics",
    ):
        resumed.save(9, make_state(9), metrics={"inference_eval/t/f1": 1.0})


def test_a_flipped_bit_is_detected_and_the_checkpoint_moved_aside(tmp_path, caplog):
    ckpt = Checkpointer(tmp_path, period=1)
    for step in (1, 2):
        ckpt.save(step, make_state(step))
    ckpt.wait_until_finished()
    assert (tmp_path / "checkpoint_2" / "checksums.json").is_file()  # sealed inside the commit
    data_file = max(
        (p for p in (tmp_path / "checkpoint_2" / "state").rglob("*") if p.is_file()),
        key=lambda p: p.stat().st_size,
    )
    data = bytearray(data_file.read_bytes())
    data[len(data) // 2] ^= 0x01
    data_file.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING):
        restored = Checkpointer(tmp_path).restore_latest(abstract_state())
    assert restored.step == 1
    assert "checksum mismatch" in caplog.text and data_file.name in caplog.text
    assert (tmp_path / "checkpoint_2.corrupt").is_dir() and not (tmp_path / "checkpoint_2").exists()
    with pytest.raises(CheckpointError, match="checksum mismatch"):
        restore_params(tmp_path / "checkpoint_2.corrupt", make_params())


def test_a_step_on_disk_is_never_saved_again(tmp_path):
    ckpt = Checkpointer(tmp_path, period=1, async_save=False)
    assert ckpt.save(3, make_state(3))
    assert not ckpt.save(3, make_state(3, seed=1), force=True)
    restored = ckpt.restore_latest(abstract_state())
    assert_trees_equal(restored.state, make_state(3))


def test_a_state_whose_step_disagrees_with_its_directory_is_refused(tmp_path):
    ckpt = Checkpointer(tmp_path, period=1, async_save=False)
    ckpt.save(4, make_state(3))
    with pytest.raises(CheckpointError, match="step 3, not 4"):
        ckpt.restore(4, abstract_state())
