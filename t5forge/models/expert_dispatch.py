"""Moving a sparse layer's dispatched tokens to the devices that hold their experts, and back.

On an expert mesh the experts' kernels are split over the expert axis and the routing groups
over the batch axes (expert x data). Left to itself, XLA's partitioner all-gathers every
expert's kernels so that each device can run all experts on its own groups. `to_experts`
instead sends each device's slots [groups, experts, capacity, embed] to the devices owning the
experts by one all-to-all over the expert axis (each device keeps its data rank's groups),
and `from_experts` sends the experts' outputs back the same way, as T5X's MoE layer does: the
kernels never move, only the tokens that chose them.

The exchange needs the mesh while a step is traced: `MoePjitPartitioner` traces its programs
inside `expert_mesh`. Without one (one device, a dense mesh), or where a layer's groups do not
split over the expert axis (a decoding step has fewer tokens than experts), both functions are
the plain transposes and XLA lays the computation out as before.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses

import jax
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P


@dataclasses.dataclass(frozen=True)
class ExpertMesh:
    """A mesh and the names of its expert axis and of the axes a batch is split over."""

    mesh: Mesh
    expert_axis: str
    batch_axes: tuple[str, ...]


_ACTIVE: contextvars.ContextVar[ExpertMesh | None] = contextvars.ContextVar(
    "t5forge_expert_mesh", default=None
)


@contextlib.contextmanager
def expert_mesh(mesh: Mesh, expert_axis: str, batch_axes: tuple[str, ...]):
    """Sparse layers traced inside exchange their tokens over `mesh`'s `expert_axis`."""
    token = _ACTIVE.set(ExpertMesh(mesh, expert_axis, tuple(batch_axes)))
    try:
        yield
    finally:
        _ACTIVE.reset(token)


def _group_layout(num_groups: int, num_experts: int):
    """(active ExpertMesh, mesh axes of the groups before the exchange, after it), or None
    when there is nothing to exchange or the groups and experts do not split evenly.

    Each device must hold whole groups: the groups split over all batch axes when they can
    (every device routes its own), else over the expert axis alone (the data replicas route
    the same groups)."""
    active = _ACTIVE.get()
    if active is None:
        return None
    sizes = active.mesh.shape
    experts = sizes[active.expert_axis]
    if experts == 1 or num_experts % experts or num_groups % experts:
        return None
    batch_devices = 1
    for axis in active.batch_axes:
        batch_devices *= sizes[axis]
    if num_groups % batch_devices == 0:
        replicas = tuple(axis for axis in active.batch_axes if axis != active.expert_axis)
        return active, active.batch_axes, replicas or None
    return active, (active.expert_axis,), None


def route_locally(route, router_probs):
    """`route(router_probs)` (routing.py's rules; every result has the groups' leading axis)
    computed by each device for its own groups [groups, tokens, experts]: XLA's partitioner
    otherwise all-gathers the router probabilities for top_k."""
    layout = _group_layout(router_probs.shape[0], router_probs.shape[-1])
    if layout is None:
        return route(router_probs)
    active, before, _ = layout
    return jax.shard_map(route, mesh=active.mesh, in_specs=P(before), out_specs=P(before))(
        router_probs
    )


def to_experts(slots):
    """slots [groups, experts, capacity, embed] -> [experts, groups, capacity, embed], on an
    expert mesh moved by one all-to-all so that each device holds only its experts' slots."""
    layout = _group_layout(slots.shape[0], slots.shape[1])
    if layout is None:
        return slots.transpose(1, 0, 2, 3)
    active, before, after = layout

    def exchange(local):  # [g, experts, c, d] -> [experts / X, g * X, c, d]
        mine = jax.lax.all_to_all(local, active.expert_axis, 1, 0, tiled=True)
        return mine.transpose(1, 0, 2, 3)

    return jax.shard_map(
        exchange, mesh=active.mesh, in_specs=P(before), out_specs=P(active.expert_axis, after)
    )(slots)


def from_experts(outputs):
    """The experts' outputs [experts, groups, capacity, embed] back to [groups, experts,
    capacity, embed] on the devices that routed the groups (`to_experts` reversed)."""
    layout = _group_layout(outputs.shape[1], outputs.shape[0])
    if layout is None:
        return outputs.transpose(1, 0, 2, 3)
    active, before, after = layout

    def exchange(local):  # [experts / X, g * X, c, d] -> [g, experts, c, d]
        return jax.lax.all_to_all(local.transpose(1, 0, 2, 3), active.expert_axis, 0, 1, tiled=True)

    return jax.shard_map(
        exchange, mesh=active.mesh, in_specs=P(active.expert_axis, after), out_specs=P(before)
    )(outputs)
