"""The train state (step, params, optimizer state) and its logical axes.

Everything a run must checkpoint and shard lives in one pytree. Its logical axes are derived
from the parameters' axes, so optimizer moments are sharded exactly like the parameters they
track (and Adafactor's factored moments like the dims they keep): nothing is ever replicated
by accident, which is what makes large models fit.
"""

from __future__ import annotations

from typing import Any

import flax.struct
import jax
import jax.numpy as jnp
import optax
from jax.sharding import PartitionSpec

from t5forge.training.optimizers import AdafactorSlots
from t5forge.training.partitioning import is_logical_axes


@flax.struct.dataclass
class TrainState:
    """Step counter, model parameters and optimizer state; the optimizer itself stays outside."""

    step: jax.Array
    params: Any
    opt_state: Any

    @classmethod
    def create(cls, params, tx: optax.GradientTransformation) -> TrainState:
        """A fresh state at step 0 (jit it with out_shardings to build it already sharded)."""
        return cls(step=jnp.zeros([], jnp.int32), params=params, opt_state=tx.init(params))

    def apply_gradients(self, grads, tx: optax.GradientTransformation) -> TrainState:
        """One optimizer step; params keep their dtypes."""
        updates, opt_state = tx.update(grads, self.opt_state, self.params)
        return self.replace(
            step=self.step + 1,
            params=optax.apply_updates(self.params, updates),
            opt_state=opt_state,
        )


def as_partition_specs(axes_tree):
    """Turns a tree of tuples of logical names (the model's contract) into PartitionSpecs."""
    return jax.tree.map(lambda axes: PartitionSpec(*axes), axes_tree, is_leaf=is_logical_axes)


def _param_index(abstract_params, param_axes) -> dict[tuple, tuple[tuple, PartitionSpec]]:
    """Param path -> (shape, logical spec), for finding a param's copies inside optimizer state."""
    specs = as_partition_specs(param_axes)
    flat_params, treedef = jax.tree_util.tree_flatten_with_path(abstract_params)
    flat_specs = treedef.flatten_up_to(specs)
    return {path: (leaf.shape, spec) for (path, leaf), spec in zip(flat_params, flat_specs)}


def _find_param(path: tuple, index: dict) -> tuple | None:
    """The parameter whose path ends `path` (optimizer states nest param trees under fields)."""
    for start in range(len(path)):
        if path[start:] in index:
            return path[start:]
    return None


def opt_state_logical_axes(opt_state, abstract_params, param_axes):
    """Logical PartitionSpecs for any optax state built from these params.

    A state leaf that mirrors a parameter (same path suffix, same shape: Adam moments, gradient
    accumulators) gets that parameter's spec; Adafactor slots get the dims they keep; counters
    and anything else are replicated.
    """
    index = _param_index(abstract_params, param_axes)

    def spec_for(path, node):
        param_path = _find_param(tuple(path), index)
        if isinstance(node, AdafactorSlots):
            return as_partition_specs(node.logical_axes(tuple(index[param_path][1])))
        if param_path is not None and index[param_path][0] == node.shape:
            return index[param_path][1]
        return PartitionSpec(*([None] * len(node.shape)))

    return jax.tree_util.tree_map_with_path(
        spec_for, opt_state, is_leaf=lambda x: isinstance(x, AdafactorSlots)
    )


def train_state_logical_axes(abstract_state: TrainState, param_axes) -> TrainState:
    """Logical PartitionSpecs for the whole train state (feed to partitioning to get shardings)."""
    return TrainState(
        step=PartitionSpec(),
        params=as_partition_specs(param_axes),
        opt_state=opt_state_logical_axes(
            abstract_state.opt_state, abstract_state.params, param_axes
        ),
    )
