"""Trainer on one device: gradient accumulation over microbatches equals one big batch; the
ahead-of-time compiled step equals the jitted one."""

import jax
import numpy as np
import optax

from t5forge.models.model import build_model
from t5forge.models.presets import get_config
from t5forge.training import partitioning
from t5forge.training.trainer import Trainer


def _batch(rng, batch=8, length=6, vocab=64):
    targets = rng.integers(2, vocab, size=(batch, length)).astype(np.int32)
    targets[:, -1] = 1
    return {
        "encoder_input_tokens": rng.integers(2, vocab, size=(batch, length)).astype(np.int32),
        "decoder_target_tokens": targets,
        "decoder_input_tokens": np.pad(targets[:, :-1], ((0, 0), (1, 0))),
        "decoder_loss_weights": np.ones_like(targets, dtype=np.int32),
    }


def _trainer(num_microbatches):
    config = get_config("t5_1_1/tiny", vocab_size=64, dtype="float32", dropout_rate=0.0)
    partitioner = partitioning.PjitPartitioner(devices=jax.devices()[:1])
    return Trainer(
        build_model(config), optax.sgd(0.5), partitioner, num_microbatches=num_microbatches
    )


def test_microbatches_sum_to_the_full_batch_step():
    batch = _batch(np.random.default_rng(0))
    results = []
    for k in (1, 4):
        trainer = _trainer(k)
        state, metrics = trainer.train_step(trainer.init_state(), batch)
        results.append((float(metrics["loss"]), jax.device_get(state.params)))
    (loss_1, params_1), (loss_4, params_4) = results
    np.testing.assert_allclose(loss_4, loss_1, rtol=1e-5)
    # One SGD step (lr 0.5) moves each leaf by 0.24-1.1 at its largest: a microbatch summed
    # wrongly is off by that much. What remains is float32's order of summing 8 rows at once
    # or 4 x 2 (up to 1.4e-6 at XLA's -O0, which orders its loops unlike -O2).
    for a, b in zip(jax.tree.leaves(params_1), jax.tree.leaves(params_4)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_batch_not_divisible_by_microbatches_is_one_line():
    import pytest

    from t5forge.errors import ConfigError

    trainer = _trainer(3)
    with pytest.raises(ConfigError, match="batch size 8 is not divisible by num_microbatches=3"):
        trainer.train_step(trainer.init_state(), _batch(np.random.default_rng(1)))


def test_compiled_train_step_reports_memory_and_steps_like_train_step():
    """benchmarks/gpu.py sizes its batch from this executable's memory analysis, then runs it."""
    batch = _batch(np.random.default_rng(2))
    trainer = _trainer(1)
    compiled = trainer.compile_train_step(trainer.init_state(), batch)
    memory = compiled.memory_analysis()
    assert memory.temp_size_in_bytes > 0 and memory.argument_size_in_bytes > 0
    global_batch = partitioning.shard_batch(batch, trainer.mesh)
    compiled_state, compiled_metrics = compiled(trainer.init_state(), global_batch, None)
    state, metrics = trainer.train_step(trainer.init_state(), batch)
    assert float(compiled_metrics["loss"]) == float(metrics["loss"])
    for a, b in zip(jax.tree.leaves(compiled_state.params), jax.tree.leaves(state.params)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
