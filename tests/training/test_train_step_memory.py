"""The train step's memory: its non-finite check must not hold a second train state.

The check needs every new value before it can decide whether a step is applied; computing the
update once and selecting with `where` kept the whole new state (params and both AdamW slots)
alive beside the donated old one, which doubled a Switch-base-8 step's footprint (docs/moe.md).
Here the parameters dwarf the activations (a 32768-token vocabulary, 2 tokens a row), so XLA's
temporary memory is about the gradients when the update runs in place, and more than the whole
AdamW state (3x the params) when it does not.
"""

import jax
import numpy as np

from t5forge.models.model import build_model
from t5forge.models.presets import get_config
from t5forge.training import optimizers, partitioning
from t5forge.training.trainer import Trainer


def _compiled_step(trainer, batch_size=2, length=2):
    tokens = np.full((batch_size, length), 2, np.int32)
    batch = {
        "encoder_input_tokens": tokens,
        "decoder_input_tokens": tokens,
        "decoder_target_tokens": tokens,
        "decoder_loss_weights": np.ones((batch_size, length), np.float32),
    }
    return trainer.compile_train_step(trainer.abstract_state(), batch)


def _tiny_adamw_trainer(vocab_size: int) -> Trainer:
    config = get_config("t5_1_1/tiny", vocab_size=vocab_size, dtype="float32", dropout_rate=0.0)
    return Trainer(
        build_model(config),
        optimizers.adamw(1e-3),
        partitioning.PjitPartitioner(devices=jax.devices()[:1]),
    )


def test_adamw_step_needs_about_the_gradients_beside_the_state():
    trainer = _tiny_adamw_trainer(vocab_size=32768)
    memory = _compiled_step(trainer).memory_analysis()
    state_bytes = memory.argument_size_in_bytes
    param_bytes = sum(
        x.size * x.dtype.itemsize for x in jax.tree.leaves(trainer.model.abstract_params())
    )
    assert state_bytes > 2.9 * param_bytes  # params and AdamW's two slots
    # In place: the gradients and the embedding's scatter (measured 1.5x the params); holding
    # a second state as well measured 3.25x.
    assert memory.temp_size_in_bytes < 2 * param_bytes, (memory.temp_size_in_bytes, param_bytes)


def test_refused_step_still_leaves_the_state_as_it_was():
    """The in-place update runs only for an applied step (a NaN loss keeps every value)."""
    trainer = _tiny_adamw_trainer(vocab_size=64)
    state = trainer.init_state()
    before = jax.device_get(state)
    rng = np.random.default_rng(0)
    tokens = rng.integers(2, 64, (2, 4)).astype(np.int32)
    batch = {
        "encoder_input_tokens": tokens,
        "decoder_input_tokens": tokens,
        "decoder_target_tokens": tokens,
        "decoder_loss_weights": np.full((2, 4), np.nan, np.float32),
    }
    state, metrics = trainer.train_step(state, batch)
    assert not bool(metrics["step_applied"])
    for a, b in zip(jax.tree.leaves(before), jax.tree.leaves(jax.device_get(state))):
        np.testing.assert_array_equal(a, b)
