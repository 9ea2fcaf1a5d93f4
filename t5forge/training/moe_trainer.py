"""T5X contrib/moe's `MoeTrainer`: the Trainer, with expert gradients scaled as T5X scales them.

T5X multiplies the gradient of every parameter whose name matches `.*expert.*` by
`num_expert_partitions` (the configured NUM_EXPERT_PARTITIONS, not the mesh's expert axis), to
undo what its authors took for pjit averaging the gradients of expert-sharded parameters. The
gradients t5forge's sharded step computes are already exact on any mesh, so the factor is kept
only so that T5X recipes behave as they did: with Adafactor (which divides by the root mean
square of the gradient) it changes nothing beyond epsilon1, with AdamW and global-norm clipping
it changes the step. The factor is the same on 1 device as on 8, so a run gives the same losses
on every mesh.
"""

from __future__ import annotations

import re

import jax

from t5forge.errors import ConfigError
from t5forge.models import param_names
from t5forge.training.partitioning import EXPERT_AXIS
from t5forge.training.trainer import Trainer

# T5X's default `sharded_match_fn`: parameters under an `expert` module (not the router).
EXPERT_PARAMS = r".*expert.*"


class MoeTrainer(Trainer):
    """A Trainer whose expert gradients are multiplied by `num_expert_partitions` (T5X's)."""

    def __init__(
        self,
        model,
        optimizer,
        partitioner,
        learning_rate_fn=None,
        num_microbatches: int = 1,
        seed: int = 0,
        *,
        num_expert_partitions: int,
        expert_params: str | None = EXPERT_PARAMS,
    ):
        if num_expert_partitions < 1:
            raise ConfigError(
                f"MoeTrainer.num_expert_partitions must be >= 1, got {num_expert_partitions}; "
                "bind it to NUM_EXPERT_PARTITIONS as the partitioner's"
            )
        super().__init__(model, optimizer, partitioner, learning_rate_fn, num_microbatches, seed)
        _check_experts_fit(model.config.num_experts, num_expert_partitions, self.mesh)
        self.num_expert_partitions = num_expert_partitions
        self.expert_params = re.compile(expert_params) if expert_params else None

    def _loss_and_grads(self, params, batch, rng):
        loss, metrics, grads = super()._loss_and_grads(params, batch, rng)
        return loss, metrics, self.scale_expert_grads(grads)

    def scale_expert_grads(self, grads):
        """`grads` with each expert parameter's gradient times `num_expert_partitions`."""
        if self.expert_params is None:
            return grads

        def scale(path, grad):
            if self.expert_params.match(param_names.path_name(path)):
                return grad * self.num_expert_partitions
            return grad

        return jax.tree_util.tree_map_with_path(scale, grads)


def _check_experts_fit(num_experts: int, num_expert_partitions: int, mesh) -> None:
    """A sparse model's experts must split evenly over the expert axis (else they would be
    silently replicated), and T5X asks for no more expert partitions than experts."""
    if not num_experts:
        return
    if num_expert_partitions > num_experts:
        raise ConfigError(
            f"NUM_EXPERT_PARTITIONS={num_expert_partitions} exceeds the model's {num_experts} "
            f"experts; use at most {num_experts}"
        )
    axis = int(mesh.shape.get(EXPERT_AXIS, 1))
    if num_experts % axis:
        raise ConfigError(
            f"the model's {num_experts} experts do not split over the expert axis of {axis} "
            f"devices; choose NUM_EXPERT_PARTITIONS so that the expert axis divides "
            f"{num_experts}"
        )
