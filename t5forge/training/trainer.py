"""Jitted, sharded train and eval steps, with gradient accumulation over microbatches.

The step functions are compiled once with pinned in/out shardings (a layout change would
recompile every step). The dropout key of step s is `fold_in(seed_key, s)` and microbatch m
gets `fold_in(that, m)`: a restarted run draws exactly the keys the uninterrupted run drew,
which is what makes restarts bitwise reproducible on CPU.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from t5forge.errors import ConfigError
from t5forge.models.init_lowering import compact_random_draws
from t5forge.training import partitioning
from t5forge.training.train_state import TrainState, train_state_logical_axes

# The metric saying whether a step's update was applied (False: refused as non-finite).
APPLIED = "step_applied"


class Trainer:
    """Owns the model and the optimizer; builds state and runs steps on batches.

    The partitioner (a `partitioning.PjitPartitioner`) decides the mesh and the layouts; the
    steps are compiled through its `partition`.
    """

    def __init__(
        self,
        model,
        optimizer: optax.GradientTransformation,
        partitioner: partitioning.PjitPartitioner,
        learning_rate_fn=None,
        num_microbatches: int = 1,
        seed: int = 0,
    ):
        if num_microbatches < 1:
            raise ConfigError(f"num_microbatches must be >= 1, got {num_microbatches}")
        self.model = model
        self.optimizer = optimizer
        self.partitioner = partitioner
        self.mesh = partitioner.mesh
        self.rules = partitioner.logical_axis_rules
        self.learning_rate_fn = learning_rate_fn
        self.num_microbatches = num_microbatches
        self.seed = seed
        self.param_axes = model.param_logical_axes()
        self.state_shardings = None
        self._train_step = None
        self._eval_step = None

    # ---- state ---------------------------------------------------------------------------

    def _new_state(self, rng):
        return TrainState.create(self.model.init_params(rng), self.optimizer)

    def state_axes(self, abstract_state):
        return train_state_logical_axes(abstract_state, self.param_axes)

    def abstract_state(self):
        """Shapes and dtypes of the train state, without allocating it: from the model's
        abstract params (traced once per model), so no call traces the network again."""
        return jax.eval_shape(
            lambda params: TrainState.create(params, self.optimizer), self.model.abstract_params()
        )

    def shardings_for(self, abstract_state):
        return partitioning.logical_to_mesh_sharding(
            self.state_axes(abstract_state), self.mesh, self.rules, shapes=abstract_state
        )

    def init_state(self) -> TrainState:
        """A fresh train state, created already sharded over the mesh."""
        with compact_random_draws():
            state, self.state_shardings = partitioning.create_sharded(
                self._new_state,
                self.state_axes,
                self.mesh,
                self.rules,
                jax.random.PRNGKey(self.seed),
                abstract=self.abstract_state(),
            )
        return state

    def state_from_params(self, params) -> TrainState:
        """A step-0 state whose parameters come from a checkpoint (optimizer state fresh)."""
        abstract = self.abstract_state()
        self.state_shardings = self.shardings_for(abstract)
        init = jax.jit(
            lambda p: TrainState.create(p, self.optimizer),
            out_shardings=self.state_shardings,
        )
        return init(jax.device_put(params, self.state_shardings.params))

    # ---- steps ---------------------------------------------------------------------------

    def _loss_and_grads(self, params, batch, rng):
        loss_fn = self.model.loss_fn
        grad_fn = jax.value_and_grad(loss_fn, has_aux=True)
        if self.num_microbatches == 1:
            (loss, metrics), grads = grad_fn(params, batch, jax.random.fold_in(rng, 0))
            return loss, metrics, grads

        k = self.num_microbatches
        micro = jax.tree.map(lambda x: x.reshape((k, x.shape[0] // k) + x.shape[1:]), batch)

        def accumulate(carry, inputs):
            index, microbatch = inputs
            (loss, metrics), grads = grad_fn(params, microbatch, jax.random.fold_in(rng, index))
            grads = jax.tree.map(lambda g: g.astype(jnp.float32), grads)
            total_loss, total_metrics, total_grads = carry
            return (
                total_loss + loss,
                jax.tree.map(jnp.add, total_metrics, metrics),
                jax.tree.map(jnp.add, total_grads, grads),
            ), None

        zero_grads = jax.tree.map(lambda p: jnp.zeros(p.shape, jnp.float32), params)
        _, metric_shapes = jax.eval_shape(loss_fn, params, jax.tree.map(lambda x: x[0], micro), rng)
        zero_metrics = jax.tree.map(lambda m: jnp.zeros(m.shape, m.dtype), metric_shapes)
        (loss, metrics, grads), _ = jax.lax.scan(
            accumulate,
            (jnp.zeros([], jnp.float32), zero_metrics, zero_grads),
            (jnp.arange(k), micro),
        )
        # Metrics are per-microbatch rates (accuracy, per-token losses): report their mean.
        # The loss is summed, as one big batch would sum it, unless the model normalizes it per
        # batch; then the mean keeps the gradient scale of a single batch.
        metrics = jax.tree.map(lambda m: m / k, metrics)
        if getattr(self.model, "loss_normalizing_factor", None) is not None:
            loss = loss / k
            grads = jax.tree.map(lambda g: g / k, grads)
        return loss, metrics, grads

    def _train_step_fn(self, state: TrainState, batch, expected_step):
        rng = jax.random.fold_in(jax.random.PRNGKey(self.seed), state.step)
        loss, metrics, grads = self._loss_and_grads(state.params, batch, rng)
        grads = jax.tree.map(lambda g, p: g.astype(p.dtype), grads, state.params)
        # A non-finite loss, parameter or optimizer value leaves the state as it was (step
        # counter included), so the last good state survives for the loop to save. (A finite
        # loss can still overflow the parameters.) Once a step was refused the counter lags
        # `expected_step`, and every later step is refused too: the state stays the last good
        # one until the loop, which checks `applied` a step late to keep the device busy,
        # notices.
        checked = state.apply_gradients(grads, self.optimizer)
        applied = jnp.isfinite(loss) & _all_finite((checked.params, checked.opt_state))
        if expected_step is not None:
            applied &= state.step == expected_step
        # The update runs twice: above only reduced to `applied` (fused, never stored), then
        # inside the cond, where it overwrites the donated state in place. Computed once and
        # selected with `where`, the whole new state (params and optimizer slots) stayed
        # alive beside the old one until `applied` was known: 7.3 of the 14.8 GB a
        # Switch-base-8 AdamW step peaked at (docs/moe.md).
        new_state = jax.lax.cond(
            applied,
            lambda s, g: s.apply_gradients(g, self.optimizer),
            lambda s, g: s,
            state,
            grads,
        )
        metrics = dict(metrics)
        metrics["loss"] = loss
        metrics[APPLIED] = applied
        if self.learning_rate_fn is not None:
            metrics["learning_rate"] = self.learning_rate_fn(state.step)
        return new_state, metrics

    def train_step(self, state: TrainState, batch: Mapping[str, Any], expected_step=None):
        """One optimizer step on a global batch; returns (new_state, metrics on device).

        Metrics carry `APPLIED`: False when the step was refused as non-finite. Given the step
        the caller expects `state` to be at, a step after a refused one is refused as well.
        """
        self._check_microbatches(batch)
        if expected_step is not None:
            expected_step = np.asarray(expected_step, np.int32)
        return self._partitioned_train_step()(state, self._to_global(batch), expected_step)

    def compile_train_step(self, state: TrainState, batch: Mapping[str, Any]):
        """The train step compiled ahead of time for these shapes: call it as
        `compiled(state, global_batch, None)`, or read `memory_analysis()` to size a batch
        before running it."""
        self._check_microbatches(batch)
        return self.partitioner.compile(
            self._partitioned_train_step(), state, self._to_global(batch), None
        )

    def _partitioned_train_step(self):
        if self._train_step is None:
            if self.state_shardings is None:
                self.state_shardings = self.shardings_for(self.abstract_state())
            self._train_step = self.partitioner.partition(
                self._train_step_fn,
                in_shardings=(self.state_shardings, "batch", None),
                out_shardings=(self.state_shardings, None),
                donate_argnums=(0,),
            )
        return self._train_step

    def eval_step(self, params, batch: Mapping[str, Any]):
        """Loss and accuracy of a batch without dropout (T5X's training_eval)."""
        if self._eval_step is None:
            param_shardings = self.state_shardings.params if self.state_shardings else None
            self._eval_step = self.partitioner.partition(
                lambda p, b: self.model.loss_fn(p, b, None),
                in_shardings=(param_shardings, "batch"),
                out_shardings=None,
            )
        loss, metrics = self._eval_step(params, self._to_global(batch))
        return {"loss": loss, **metrics}

    # ---- batches -------------------------------------------------------------------------

    def _to_global(self, batch):
        if all(isinstance(x, jax.Array) for x in batch.values()):
            return dict(batch)
        return partitioning.shard_batch({k: np.asarray(v) for k, v in batch.items()}, self.mesh)

    def _check_microbatches(self, batch):
        size = int(np.shape(next(iter(batch.values())))[0]) * jax.process_count()
        if size % self.num_microbatches:
            raise ConfigError(
                f"batch size {size} is not divisible by num_microbatches={self.num_microbatches}"
            )


def _all_finite(tree) -> jax.Array:
    """One boolean: every floating-point value in `tree` is finite."""
    checks = [
        jnp.isfinite(leaf).all()
        for leaf in jax.tree.leaves(tree)
        if jnp.issubdtype(leaf.dtype, jnp.inexact)
    ]
    return jnp.all(jnp.stack(checks)) if checks else jnp.bool_(True)


def metrics_to_host(metrics) -> dict[str, float]:
    """Device metrics -> plain floats (one transfer), for logging."""
    return {k: float(v) for k, v in jax.device_get(metrics).items()}
