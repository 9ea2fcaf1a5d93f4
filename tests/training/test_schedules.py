"""Learning-rate factor products match hand-computed T5X values."""

import math

import gin
import numpy as np
import pytest

from t5forge.errors import ConfigError
from t5forge.training.schedules import create_learning_rate_scheduler


def _at(schedule, *steps):
    return [float(schedule(s)) for s in steps]


def test_pretraining_schedule_is_inverse_sqrt_with_plateau():
    schedule = create_learning_rate_scheduler("constant * rsqrt_decay", 1.0, warmup_steps=10000)
    np.testing.assert_allclose(
        _at(schedule, 0, 5000, 10000, 40000), [0.01, 0.01, 0.01, 0.005], rtol=1e-6
    )


def test_linear_warmup_then_rsqrt():
    schedule = create_learning_rate_scheduler(
        "constant * linear_warmup * rsqrt_decay", 0.5, warmup_steps=100
    )
    np.testing.assert_allclose(
        _at(schedule, 50, 100, 400), [0.5 * 0.5 / 10, 0.05, 0.025], rtol=1e-6
    )


def test_rsqrt_normalized_decay_starts_at_base():
    schedule = create_learning_rate_scheduler(
        "constant * rsqrt_normalized_decay", 0.2, warmup_steps=100
    )
    np.testing.assert_allclose(_at(schedule, 10, 100, 400), [0.2, 0.2, 0.1], rtol=1e-6)


def test_linear_decay_implies_warmup_and_floors_at_minimum():
    schedule = create_learning_rate_scheduler(
        "linear_decay", 1.0, warmup_steps=10, decay_factor=0.1
    )
    np.testing.assert_allclose(_at(schedule, 5, 10, 15, 30), [0.5, 1.0, 0.5, 1e-8], rtol=1e-6)


def test_cosine_decay_cycles():
    schedule = create_learning_rate_scheduler(
        "constant * cosine_decay", 2.0, warmup_steps=0, steps_per_cycle=100
    )
    expected = [2.0, 1.0, 2.0 * 0.5 * (1 + math.cos(math.pi * 0.75)), 2.0]
    np.testing.assert_allclose(_at(schedule, 0, 50, 75, 100), expected, rtol=1e-5)


def test_decay_every_and_step_offset():
    schedule = create_learning_rate_scheduler(
        "constant * decay_every", 1.0, decay_factor=0.5, steps_per_decay=10, step_offset=100
    )
    np.testing.assert_allclose(_at(schedule, 50, 109, 110, 125), [1.0, 1.0, 0.5, 0.25])


def test_unknown_factor_suggests_the_close_name():
    with pytest.raises(ConfigError, match="unknown learning-rate factor 'rsqrt_decy'.*rsqrt_decay"):
        create_learning_rate_scheduler("constant * rsqrt_decy")


def test_t5x_gin_binding_names_work():
    from t5forge.gin_config import gin_registry  # the gin names the commands bind

    with gin.unlock_config():
        gin.parse_config(
            [
                "utils.create_learning_rate_scheduler.factors = 'constant'",
                "utils.create_learning_rate_scheduler.base_learning_rate = 0.001",
            ]
        )
    try:
        assert float(gin_registry.create_learning_rate_scheduler()(123)) == pytest.approx(0.001)
    finally:
        gin.clear_config()
