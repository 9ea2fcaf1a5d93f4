"""Learning-rate schedules written as T5X writes them: a product of named factors.

T5X recipes say `factors = 'constant * rsqrt_decay'`, `base_learning_rate = 1.0`,
`warmup_steps = 10000`; accepting the same string and knobs means those recipes (and their
tuned numbers) work unchanged. The command line registers it with gin as
`utils.create_learning_rate_scheduler`, the name T5X gin files bind (t5forge.gin_config.gin_registry).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass

import jax
import jax.numpy as jnp

from t5forge.errors import ConfigError


@dataclass(frozen=True)
class ScheduleKnobs:
    """The numbers the factors read; one set shared by every factor in the product."""

    base_learning_rate: float
    warmup_steps: int
    decay_factor: float
    steps_per_decay: int
    steps_per_cycle: int


def _constant(step, knobs: ScheduleKnobs):
    return knobs.base_learning_rate


def _linear_warmup(step, knobs: ScheduleKnobs):
    return jnp.minimum(1.0, step / knobs.warmup_steps)


def _rsqrt_decay(step, knobs: ScheduleKnobs):
    return jax.lax.rsqrt(jnp.maximum(step, knobs.warmup_steps))


def _rsqrt_normalized_decay(step, knobs: ScheduleKnobs):
    return jnp.sqrt(float(knobs.warmup_steps)) * _rsqrt_decay(step, knobs)


def _linear_decay(step, knobs: ScheduleKnobs):
    """Warmup to base, then down by `decay_factor` per step (implies constant * linear_warmup)."""
    warmup = step / knobs.warmup_steps
    decay = 1.0 + knobs.decay_factor * (knobs.warmup_steps - step)
    return knobs.base_learning_rate * jnp.minimum(warmup, decay)


def _cosine_decay(step, knobs: ScheduleKnobs):
    progress = jnp.maximum(0.0, (step - knobs.warmup_steps) / float(knobs.steps_per_cycle))
    return jnp.maximum(0.0, 0.5 * (1.0 + jnp.cos(jnp.pi * (progress % 1.0))))


def _decay_every(step, knobs: ScheduleKnobs):
    return knobs.decay_factor ** (step // knobs.steps_per_decay)


FACTORS: dict[str, Callable] = {
    "constant": _constant,
    "linear_warmup": _linear_warmup,
    "rsqrt_decay": _rsqrt_decay,
    "rsqrt_normalized_decay": _rsqrt_normalized_decay,
    "linear_decay": _linear_decay,
    "cosine_decay": _cosine_decay,
    "decay_every": _decay_every,
}


def parse_factors(factors: str) -> list[str]:
    """Splits 'constant * rsqrt_decay' into names; an unknown name is a one-line ConfigError."""
    names = [name.strip() for name in factors.split("*")]
    for name in names:
        if name not in FACTORS:
            close = difflib.get_close_matches(name, FACTORS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(
                f"unknown learning-rate factor {name!r} in {factors!r}{hint}; "
                f"known factors: {', '.join(FACTORS)}"
            )
    return names


def create_learning_rate_scheduler(
    factors: str = "constant * linear_warmup * rsqrt_decay",
    base_learning_rate: float = 0.5,
    warmup_steps: int = 1000,
    decay_factor: float = 0.5,
    steps_per_decay: int = 20000,
    steps_per_cycle: int = 100000,
    step_offset: int = 0,
    min_learning_rate: float = 1e-8,
) -> Callable[[jax.Array], jax.Array]:
    """Returns step -> float32 learning rate, the product of the named factors.

    Defaults are T5X's. `step_offset` restarts the schedule (e.g. at the first fine-tuning
    step) and `min_learning_rate` floors the result so a decaying product never reaches 0.
    """
    names = parse_factors(factors)
    knobs = ScheduleKnobs(
        base_learning_rate, warmup_steps, decay_factor, steps_per_decay, steps_per_cycle
    )

    def schedule(step):
        step = jnp.maximum(0, jnp.asarray(step) - step_offset).astype(jnp.float32)
        rate = jnp.ones([], jnp.float32)
        for name in names:
            rate = rate * FACTORS[name](step, knobs)
        return jnp.maximum(rate, min_learning_rate).astype(jnp.float32)

    return schedule
