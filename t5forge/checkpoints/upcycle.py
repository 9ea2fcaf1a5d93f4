"""Sparse upcycling (T5X contrib/moe's `UpcycleCheckpointer`): a sparse model from a dense one.

A mixture-of-experts model starts from a dense checkpoint: every expert of a sparse MLP gets
the dense MLP's weights of that layer (broadcast along the leading 'expert' axis), the routers
start fresh, everything else is restored under its own name, and the optimizer state starts
fresh (a run builds it from the restored parameters). With every expert equal to the dense MLP
and top-1 routing the sparse model computes what the dense one did, tokens dropped for lack of
capacity aside, which is what makes upcycling a warm start rather than a new model.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec

from t5forge.checkpoints import formats, remote_model_dir
from t5forge.checkpoints.step_dir import (
    AssignmentMap,
    RestoreReport,
    restore_params,
    source_name,
)
from t5forge.errors import CheckpointError, ConfigError
from t5forge.models import param_names

# t5forge's names for T5X's sparse_upcycle.gin map ('target(.*)mlp\/expert(.*)' ->
# 'target\1mlp\2', '.*\/router\/.*' -> fresh): experts read their layer's dense MLP.
UPCYCLE_ASSIGNMENT_MAP: AssignmentMap = (
    (r"(.*)mlp/expert/(.*)", r"\1mlp/\2"),
    (r".*/router/.*", None),
)


def is_expert_param(name: str) -> bool:
    """Whether a parameter holds one weight per expert (T5X's test: 'expert/' in its name)."""
    return "expert/" in name


def _without_expert_dim(leaf) -> jax.ShapeDtypeStruct:
    """What the dense checkpoint holds for an expert parameter: its shape and placement minus
    the leading expert dim."""
    sharding = getattr(leaf, "sharding", None)
    if isinstance(sharding, NamedSharding):
        sharding = NamedSharding(sharding.mesh, PartitionSpec(*sharding.spec[1:]))
    return jax.ShapeDtypeStruct(leaf.shape[1:], leaf.dtype, sharding=sharding)


def _broadcast(dense: jax.Array, target) -> jax.Array:
    """`dense` repeated for every expert, built straight into the target's sharding."""
    sharding = getattr(target, "sharding", None)
    shape = tuple(target.shape)
    return jax.jit(
        lambda a: jnp.broadcast_to(a[None], shape).astype(target.dtype), out_shardings=sharding
    )(dense)


class UpcycleCheckpointer:
    """Restores a sparse model's parameters from a dense t5forge checkpoint (or model dir; a
    bucket's through its local mirror). Other formats are converted to t5forge's first.

    `num_experts` is the sparse model's number of experts (T5X's
    `checkpoints.UpcycleCheckpointer.num_experts = %NUM_EXPERTS`); a run names this class as
    `RestoreCheckpointConfig.checkpointer_cls`, as T5X's sparse_upcycle.gin does.
    """

    def __init__(self, num_experts: int):
        if num_experts < 1:
            raise ConfigError(
                f"UpcycleCheckpointer.num_experts must be >= 1, got {num_experts}; bind it to "
                "the model's NUM_EXPERTS"
            )
        self.num_experts = num_experts

    def restore_params(
        self, path, target_params, assignment_map: AssignmentMap = ()
    ) -> tuple[Any, RestoreReport]:
        """(params shaped like `target_params`, report); `assignment_map` defaults to
        `UPCYCLE_ASSIGNMENT_MAP`. Expert parameters the map restores must have `num_experts`
        rows and the dense shape after them; those it keeps fresh stay as given."""
        path = remote_model_dir.local_copy(path)
        fmt = formats.detect_format(path)
        if fmt in formats.FOREIGN:
            raise CheckpointError(
                f"sparse upcycling reads t5forge checkpoints and {path} is a {fmt} one; convert "
                f"it first (t5forge convert --from {fmt} --to t5forge --input {path} --output "
                "DIR, with the dense model's --gin_file) and upcycle DIR"
            )
        assignment_map = assignment_map or UPCYCLE_ASSIGNMENT_MAP
        targets = param_names.named_leaves(target_params)
        experts = [
            name
            for name in targets
            if is_expert_param(name) and source_name(name, assignment_map) is not None
        ]
        for name in experts:
            if not targets[name].shape or targets[name].shape[0] != self.num_experts:
                raise ConfigError(
                    f"{name!r} has shape {tuple(targets[name].shape)}, not {self.num_experts} "
                    f"experts first; set UpcycleCheckpointer.num_experts to the model's NUM_EXPERTS"
                )
        dense_view = {
            name: _without_expert_dim(leaf) if name in experts else leaf
            for name, leaf in targets.items()
        }
        params, report = restore_params(
            path,
            param_names.unflatten_like(target_params, dense_view),
            assignment_map,
        )
        restored = param_names.named_leaves(params)
        upcycled = {name: _broadcast(restored[name], targets[name]) for name in experts}
        return param_names.unflatten_like(target_params, {**restored, **upcycled}), report
