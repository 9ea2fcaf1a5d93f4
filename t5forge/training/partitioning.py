"""Meshes, logical-axis rules and shardings: how one program runs on 1 or 1000 devices.

Models name their dimensions logically ('embed', 'mlp', 'heads', 'batch'...); a short list of
rules maps those names onto a ('data', 'model') device mesh, as in T5X, or onto T5X's
('data', 'expert', 'model') mesh for mixture-of-experts models. Changing the layout (pure data
parallel, model parallel, FSDP, expert parallel) is then a change of rules, never of model code.
State is created already sharded, so no device ever holds a whole copy of a large model.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import flax.linen as nn
import jax
import numpy as np
from jax.experimental import mesh_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from t5forge.errors import ConfigError
from t5forge.models import axes, expert_dispatch

DATA_AXIS = "data"
EXPERT_AXIS = "expert"
MODEL_AXIS = "model"

LogicalAxisRules = Sequence[tuple[str, str | tuple[str, ...] | None]]

# Logical names that are never sharded (T5X's "replicated" rules).
_REPLICATED_NAMES = (
    axes.RELPOS_BUCKETS,
    "abspos_buckets",
    axes.LENGTH,
    axes.LAYERS,
    "stack",
    "mlp_activations",
    axes.KV,
    axes.UNMODELED,
)


def standard_logical_axis_rules(
    fsdp: bool = False, overrides: LogicalAxisRules = (), expert_parallel: bool = False
) -> tuple[tuple[str, str | tuple[str, ...] | None], ...]:
    """T5X's 1-D parameter/activation rules, plus FSDP, expert parallelism and user overrides.

    With `fsdp=True`, 'embed' maps to 'data', so parameters (and their optimizer moments) are
    also split across the data-parallel devices; activations keep 'batch' on 'data' because a
    mesh axis is used once per array and 'batch' comes first. With `expert_parallel=True`
    (T5X's contrib/moe rules, for the mesh `create_expert_mesh` builds) experts are split over
    'expert' and the batch over ('expert', 'data'), so the expert devices also share the data;
    without it a sparse layer's experts are replicated. `overrides` come first, so they win
    over the standard rules.
    """
    rules = [
        (axes.BATCH, (EXPERT_AXIS, DATA_AXIS) if expert_parallel else DATA_AXIS),
        (axes.VOCAB, MODEL_AXIS),
        (axes.MLP, MODEL_AXIS),
        (axes.HEADS, MODEL_AXIS),
        (axes.JOINED_KV, MODEL_AXIS),
        (axes.EMBED, DATA_AXIS if fsdp else None),
        (axes.EXPERT, EXPERT_AXIS if expert_parallel else None),
        (axes.EXPERT_MLP, MODEL_AXIS),
        (axes.EXPERT_REPLICAS, DATA_AXIS if expert_parallel else None),
    ]
    rules += [(name, None) for name in _REPLICATED_NAMES]
    return tuple(overrides) + tuple(rules)


def create_mesh(
    num_partitions: int = 1,
    mesh_shape: tuple[int, int] | None = None,
    devices: Sequence[jax.Device] | None = None,
) -> Mesh:
    """A ('data', 'model') mesh: `num_partitions`-way model parallel, the rest data parallel.

    `mesh_shape=(data, model)` fixes both sizes explicitly. Devices default to all devices of
    all processes, laid out by XLA's topology-aware helper.
    """
    devices = list(jax.devices() if devices is None else devices)
    if mesh_shape is None:
        if num_partitions < 1 or len(devices) % num_partitions:
            raise ConfigError(
                f"num_partitions={num_partitions} does not divide the {len(devices)} devices; "
                "choose a divisor of the device count"
            )
        mesh_shape = (len(devices) // num_partitions, num_partitions)
    if int(np.prod(mesh_shape)) != len(devices):
        raise ConfigError(
            f"mesh_shape={tuple(mesh_shape)} needs {int(np.prod(mesh_shape))} devices but "
            f"{len(devices)} are available; make data * model equal the device count"
        )
    try:
        grid = mesh_utils.create_device_mesh(tuple(mesh_shape), devices)
    except (ValueError, NotImplementedError, AssertionError):
        grid = np.asarray(devices, dtype=object).reshape(mesh_shape)
    return Mesh(grid, (DATA_AXIS, MODEL_AXIS))


def expert_axis_size(data_size: int, num_expert_partitions: int) -> int:
    """The largest divisor of the data axis that is at most `num_expert_partitions` (T5X's)."""
    if num_expert_partitions < 1:
        raise ConfigError(
            f"num_expert_partitions={num_expert_partitions} must be >= 1; use at most the number "
            "of experts (T5X's NUM_EXPERT_PARTITIONS defaults to NUM_EXPERTS)"
        )
    size = min(num_expert_partitions, data_size)
    while data_size % size:
        size -= 1
    return size


def create_expert_mesh(
    num_expert_partitions: int,
    num_partitions: int = 1,
    mesh_shape: tuple[int, int] | None = None,
    devices: Sequence[jax.Device] | None = None,
) -> Mesh:
    """T5X's ('data', 'expert', 'model') mesh: the 'expert' axis is carved out of 'data'.

    The (data, model) mesh `create_mesh` builds is cut so that its data axis becomes
    data/expert x expert, expert being the largest divisor of the data size up to
    `num_expert_partitions` (fewer devices than partitions asked for get a smaller expert axis,
    as in T5X, rather than an error). Model parallelism is unchanged.
    """
    base = create_mesh(num_partitions, mesh_shape, devices)
    data_size, model_size = base.devices.shape
    experts = expert_axis_size(data_size, num_expert_partitions)
    grid = base.devices.reshape(data_size // experts, experts, model_size)
    return Mesh(grid, (DATA_AXIS, EXPERT_AXIS, MODEL_AXIS))


def _mesh_axis_size(mesh: Mesh, axis: str | tuple[str, ...] | None) -> int:
    names = () if axis is None else (axis,) if isinstance(axis, str) else axis
    return int(np.prod([mesh.shape[name] for name in names]))


def is_logical_axes(node) -> bool:
    """True for one array's logical axes: a PartitionSpec, or a tuple of names/None.

    Plain tuples are also pytree containers (optax states are tuples), so only non-empty
    tuples made of names count; write a scalar's axes as `PartitionSpec()`.
    """
    if isinstance(node, PartitionSpec):
        return True
    return (
        type(node) is tuple
        and len(node) > 0
        and all(name is None or isinstance(name, str) for name in node)
    )


def logical_to_mesh_spec(
    logical_axes: Sequence[str | None],
    mesh: Mesh,
    rules: LogicalAxisRules,
    shape: Sequence[int] | None = None,
) -> PartitionSpec:
    """Mesh PartitionSpec for one array; with `shape`, dims a mesh axis can't divide stay whole."""
    spec = list(nn.logical_to_mesh_axes(tuple(logical_axes), rules))
    spec += [None] * (len(logical_axes) - len(spec))
    if shape is not None:
        spec = [
            axis if size % _mesh_axis_size(mesh, axis) == 0 else None
            for axis, size in zip(spec, shape)
        ]
    return PartitionSpec(*spec)


def logical_to_mesh_sharding(axes_tree, mesh: Mesh, rules: LogicalAxisRules, shapes=None):
    """NamedSharding tree for a tree of logical axes (tuples or PartitionSpecs of names).

    `shapes` (e.g. from `jax.eval_shape`) lets tiny test models with dims smaller than the mesh
    fall back to replication on those dims instead of failing.
    """
    if shapes is None:
        return jax.tree.map(
            lambda names: NamedSharding(mesh, logical_to_mesh_spec(names, mesh, rules)),
            axes_tree,
            is_leaf=is_logical_axes,
        )
    return jax.tree.map(
        lambda leaf, names: NamedSharding(
            mesh, logical_to_mesh_spec(names, mesh, rules, leaf.shape)
        ),
        shapes,
        axes_tree,
    )


def create_sharded(
    init_fn: Callable[..., Any],
    logical_axes: Any,
    mesh: Mesh,
    rules: LogicalAxisRules,
    *init_args,
    abstract: Any = None,
):
    """Runs `init_fn(*init_args)` so each device only ever computes and holds its own shards.

    `logical_axes` is the axes tree of the result, or a function from the abstract result
    (`jax.eval_shape`) to it (handy for train states). `abstract` is that result's shapes when
    the caller has them already (tracing `init_fn` again costs a second or more for a large
    model). Returns (tree, sharding tree); pass the shardings on as the step's in/out
    shardings so the layout never changes (no recompiles).
    """
    if abstract is None:
        abstract = jax.eval_shape(init_fn, *init_args)
    axes_tree = logical_axes(abstract) if callable(logical_axes) else logical_axes
    shardings = logical_to_mesh_sharding(axes_tree, mesh, rules, shapes=abstract)
    return jax.jit(init_fn, out_shardings=shardings)(*init_args), shardings


def batch_mesh_axes(mesh: Mesh) -> str | tuple[str, str]:
    """The mesh axes a batch is split over: 'data', or ('expert', 'data') on an expert mesh."""
    return (EXPERT_AXIS, DATA_AXIS) if EXPERT_AXIS in mesh.shape else DATA_AXIS


def data_parallel_size(mesh: Mesh) -> int:
    """How many ways a batch is split (the expert devices count: they share the data)."""
    return _mesh_axis_size(mesh, batch_mesh_axes(mesh))


def check_batch_divisible(global_batch_size: int, mesh: Mesh) -> None:
    """Every data-parallel replica must get the same number of examples."""
    size = data_parallel_size(mesh)
    if global_batch_size % size:
        raise ConfigError(
            f"global batch size {global_batch_size} is not divisible by the data-parallel size "
            f"{size}; use a batch size that is a multiple of {size}"
        )


def batch_sharding(mesh: Mesh) -> NamedSharding:
    """Sharding of a batch array: leading (example) dim split over the data axes, the rest
    whole."""
    return NamedSharding(mesh, PartitionSpec(batch_mesh_axes(mesh)))


def shard_batch(host_batch: dict, mesh: Mesh) -> dict:
    """Builds global arrays from this process's slice of the batch (works on 1 or N hosts).

    Each process passes the examples it loaded (global batch / process count of them); JAX
    stitches them into one array split over the data axes without moving data between hosts.
    """
    sharding = batch_sharding(mesh)
    for name, array in host_batch.items():
        if np.ndim(array) == 0:
            raise ConfigError(f"batch feature {name!r} is a scalar; features need a batch dim")
        check_batch_divisible(int(np.shape(array)[0]) * jax.process_count(), mesh)
    return {
        name: jax.make_array_from_process_local_data(sharding, np.asarray(array))
        for name, array in host_batch.items()
    }


class PjitPartitioner:
    """Owns the device mesh and the logical-axis rules, and compiles functions over them.

    T5X's `partitioning.PjitPartitioner`: `num_partitions`-way model parallelism (or an explicit
    `mesh_shape=(data, model)`), `fsdp=True` to also split parameters over the data axis, and
    `logical_axis_rules` that win over the standard ones. The mesh is made on first use, so a
    partitioner can be configured (by gin or in Python) before `jax.distributed` starts.
    """

    def __init__(
        self,
        num_partitions: int = 1,
        mesh_shape: Sequence[int] | None = None,
        fsdp: bool = False,
        logical_axis_rules: LogicalAxisRules = (),
        devices: Sequence[jax.Device] | None = None,
    ):
        self.num_partitions = num_partitions
        self.mesh_shape = tuple(mesh_shape) if mesh_shape is not None else None
        self.fsdp = fsdp
        self.logical_axis_rules = standard_logical_axis_rules(
            fsdp=fsdp, overrides=tuple(tuple(rule) for rule in logical_axis_rules)
        )
        self._devices = devices

    def __repr__(self) -> str:
        return (
            f"PjitPartitioner(num_partitions={self.num_partitions}, "
            f"mesh_shape={self.mesh_shape}, fsdp={self.fsdp})"
        )

    @functools.cached_property
    def mesh(self) -> Mesh:
        return create_mesh(self.num_partitions, self.mesh_shape, self._devices)

    def sharding(self, logical_axes_tree, shapes=None):
        """NamedShardings for a tree of logical axes (see `logical_to_mesh_sharding`)."""
        return logical_to_mesh_sharding(
            logical_axes_tree, self.mesh, self.logical_axis_rules, shapes
        )

    def partition(
        self, fn: Callable, in_shardings, out_shardings, donate_argnums=(), static_argnums=()
    ):
        """`fn` jitted over the mesh with pinned in/out layouts (T5X's `partition`).

        Shardings may be NamedShardings (or trees of them), None to let XLA choose, or the
        string 'batch' for an argument laid out as a data batch.
        """
        return jax.jit(
            fn,
            in_shardings=self._resolve(in_shardings),
            out_shardings=self._resolve(out_shardings),
            donate_argnums=donate_argnums,
            static_argnums=static_argnums,
        )

    def compile(self, partitioned_fn, *args):
        """Ahead-of-time compilation for concrete or abstract (ShapeDtypeStruct) arguments."""
        return partitioned_fn.lower(*args).compile()

    def check_batch_divisible(self, global_batch_size: int) -> None:
        check_batch_divisible(global_batch_size, self.mesh)

    def _resolve(self, shardings):
        batch = batch_sharding(self.mesh)
        return jax.tree.map(
            lambda s: batch if s == axes.BATCH else s,
            shardings,
            is_leaf=lambda s: s is None or isinstance(s, str),
        )


class MoePjitPartitioner(PjitPartitioner):
    """T5X's contrib/moe `MoePjitPartitioner`: a ('data', 'expert', 'model') mesh.

    `num_expert_partitions` (T5X's NUM_EXPERT_PARTITIONS, at most the number of experts) is the
    upper bound of the expert axis, which `create_expert_mesh` carves out of the data axis.
    Experts' weights, and with them their optimizer state (Adafactor's factored rows and
    columns keep the 'expert' dim), are split over 'expert'; batches over ('expert', 'data').
    """

    def __init__(
        self,
        num_expert_partitions: int,
        num_partitions: int = 1,
        mesh_shape: Sequence[int] | None = None,
        fsdp: bool = False,
        logical_axis_rules: LogicalAxisRules = (),
        devices: Sequence[jax.Device] | None = None,
    ):
        super().__init__(num_partitions, mesh_shape, fsdp, logical_axis_rules, devices)
        expert_axis_size(1, num_expert_partitions)  # refuses a size below 1 now, not at first use
        self.num_expert_partitions = num_expert_partitions
        self.logical_axis_rules = standard_logical_axis_rules(
            fsdp=fsdp,
            overrides=tuple(tuple(rule) for rule in logical_axis_rules),
            expert_parallel=True,
        )

    def __repr__(self) -> str:
        return (
            f"MoePjitPartitioner(num_expert_partitions={self.num_expert_partitions}, "
            f"num_partitions={self.num_partitions}, mesh_shape={self.mesh_shape}, "
            f"fsdp={self.fsdp})"
        )

    @functools.cached_property
    def mesh(self) -> Mesh:
        return create_expert_mesh(
            self.num_expert_partitions, self.num_partitions, self.mesh_shape, self._devices
        )

    def partition(
        self, fn: Callable, in_shardings, out_shardings, donate_argnums=(), static_argnums=()
    ):
        """As PjitPartitioner's, `fn` traced inside `expert_dispatch.expert_mesh`, so that the
        sparse layers move their tokens to the experts' devices by all-to-all."""

        @functools.wraps(fn)
        def on_expert_mesh(*args):
            with expert_dispatch.expert_mesh(self.mesh, EXPERT_AXIS, batch_mesh_axes(self.mesh)):
                return fn(*args)

        return super().partition(
            on_expert_mesh, in_shardings, out_shardings, donate_argnums, static_argnums
        )


def initialize_distributed(
    coordinator_address: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    initialization_timeout: int | None = None,
) -> None:
    """Joins a multi-host run (T5X flags --coordinator_address, --process_count, --process_index;
    --initialization_timeout in seconds, JAX's default when None).

    Give all three, or none to let JAX detect the cluster (SLURM, TPU pods, ...). Must run
    before anything else touches JAX devices.
    """
    given = [coordinator_address is not None, num_processes is not None, process_id is not None]
    if any(given) and not all(given):
        raise ConfigError(
            "multi-host setup needs coordinator_address, process_count and process_index "
            "together (or none of them, to auto-detect the cluster)"
        )
    if num_processes is not None and not 0 <= process_id < num_processes:
        raise ConfigError(
            f"process_index {process_id} is out of range for process_count {num_processes}; "
            f"use 0..{num_processes - 1}"
        )
    timeout = (
        {} if initialization_timeout is None else {"initialization_timeout": initialization_timeout}
    )
    jax.distributed.initialize(coordinator_address, num_processes, process_id, **timeout)
