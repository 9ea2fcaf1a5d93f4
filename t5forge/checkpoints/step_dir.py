"""One `checkpoint_<step>/` directory read on its own: find it from a model dir or a path, its
metadata, its parameters by name (with T5X's assignment map), its checksums and arrays
(`t5forge checkpoint verify`). The Checkpointer (t5forge.checkpoints.checkpointer) writes these
directories and restores a run from them; the reader, convert and the CLI read one directly.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jax
import orbax.checkpoint as ocp

from t5forge.checkpoints import abandoned_reads, integrity
from t5forge.errors import CheckpointError
from t5forge.models import param_names

STEP_PREFIX = "checkpoint"
STATE, DATASET, METADATA = "state", "dataset", "metadata"

AssignmentMap = Sequence[tuple[str, str | None]]


@dataclass
class RestoreReport:
    """Which parameters came from the checkpoint (target <- source) and which stayed fresh."""

    restored: list[tuple[str, str]] = field(default_factory=list)
    fresh: list[str] = field(default_factory=list)

    def summary(self) -> str:
        return (
            f"restored {len(self.restored)} parameters from the checkpoint, "
            f"kept {len(self.fresh)} freshly initialised"
            + (f" ({', '.join(self.fresh)})" if self.fresh else "")
        )


def stored_param_shapes(step_dir: Path) -> dict[str, tuple[int, ...]]:
    """Parameter name -> shape, read from a checkpoint's metadata (no array data is loaded)."""
    abandoned_reads.drop_stray_completions()
    state_dir = Path(step_dir) / STATE
    try:
        tree = ocp.PyTreeCheckpointHandler().metadata(state_dir).tree
    except Exception as error:  # noqa: BLE001 - report any unreadable metadata the same way
        raise CheckpointError(
            f"cannot read checkpoint metadata in {state_dir} ({type(error).__name__}); "
            "point to a checkpoint_<step> directory written by t5forge"
        ) from error
    if "params" not in tree:
        raise CheckpointError(f"{state_dir} holds no 'params'; it is not a t5forge train state")
    return param_names.shapes(tree["params"])


def check_params_match(step_dir: Path, abstract_params) -> None:
    """CheckpointError naming the first parameter whose name or shape differs from the model."""
    check_shapes(step_dir, stored_param_shapes(step_dir), abstract_params)


def check_shapes(step_dir: Path, stored: dict[str, tuple[int, ...]], abstract_params) -> None:
    """Every model parameter must be stored with its shape; extra stored ones are harmless."""
    mismatch = param_names.shape_mismatch(
        param_names.shapes(abstract_params), stored, allow_extra=True
    )
    if mismatch:
        raise CheckpointError(
            f"checkpoint {step_dir} does not match the model: it {mismatch}; use a fresh "
            "MODEL_DIR or the model config the checkpoint was trained with"
        )


def resolve_step_dir(path: str | Path) -> Path:
    """Accepts a checkpoint_<step> directory or a model directory (then its latest checkpoint)."""
    path = Path(path).absolute()
    if (path / STATE).is_dir():
        return path
    steps = (
        sorted(
            (int(m.group(1)), p)
            for p in path.glob(f"{STEP_PREFIX}_*")
            if (m := re.fullmatch(rf"{STEP_PREFIX}_(\d+)", p.name)) and (p / STATE).is_dir()
        )
        if path.is_dir()
        else []
    )
    if not steps:
        raise CheckpointError(
            f"no t5forge checkpoint at {path}; give a checkpoint_<step> directory or a model "
            "directory containing one"
        )
    return steps[-1][1]


def read_metadata(step_dir: str | Path) -> dict:
    """What a checkpoint was saved with (step, model config, vocabulary, data settings), read
    without orbax or a train state; {} for a checkpoint saved without metadata."""
    file = Path(step_dir) / METADATA / METADATA
    if not file.is_file():
        return {}
    try:
        return json.loads(file.read_text())
    except (OSError, ValueError) as error:
        raise CheckpointError(
            f"cannot read {file} ({error}); the checkpoint is damaged: use an "
            "earlier checkpoint_<step>"
        ) from None


def source_name(target: str, assignment_map: AssignmentMap) -> str | None:
    """The checkpoint name for a model parameter: first fully matching rule wins, None = fresh."""
    for pattern, replacement in assignment_map:
        match = re.fullmatch(pattern, target)
        if match:
            return None if replacement is None else match.expand(replacement)
    return target


def restore_params(
    path: str | Path, target_params, assignment_map: AssignmentMap = ()
) -> tuple[Any, RestoreReport]:
    """Initialises a model's parameters from a t5forge checkpoint (fine-tuning, partial reuse).

    `target_params` is the model's freshly initialised parameters (arrays, possibly sharded) or
    their abstract shapes. `assignment_map` is a list of (regex, replacement) applied to each
    '/'-joined parameter name: the first regex that fully matches decides; a replacement (may
    use \\1 groups) names the checkpoint parameter to load, None keeps the fresh value.
    Unmatched names load the same name. Restored arrays take the target's dtype and sharding.
    """
    step_dir = resolve_step_dir(path)
    integrity.verify(step_dir)
    stored = stored_param_shapes(step_dir)
    targets = param_names.named_leaves(target_params)
    report = RestoreReport()
    wanted: dict[str, Any] = {}
    for name, leaf in targets.items():
        source = source_name(name, assignment_map)
        if source is None:
            if not isinstance(leaf, jax.Array):
                raise CheckpointError(
                    f"{name!r} is kept fresh by the assignment map but only its shape was given; "
                    "pass the initialised parameters to restore_params"
                )
            report.fresh.append(name)
            continue
        if source not in stored:
            raise CheckpointError(
                f"parameter {source!r} (for {name!r}) is not in {step_dir}; add "
                f"({name!r}, None) to the assignment map to keep it freshly initialised"
            )
        if stored[source] != tuple(leaf.shape):
            raise CheckpointError(
                f"cannot restore {name!r} from {source!r} in {step_dir}: shape {stored[source]} "
                f"in the checkpoint but {tuple(leaf.shape)} in the model"
            )
        wanted[source] = leaf
        report.restored.append((name, source))
    loaded = _load_named_params(step_dir, wanted)
    values = {name: targets[name] for name in report.fresh}
    for target, source in report.restored:
        values[target] = _like(loaded[source], targets[target])
    return param_names.unflatten_like(target_params, values), report


def _like(array: jax.Array, target) -> jax.Array:
    """`array` in the target's dtype and placement (one source may feed several targets)."""
    if array.dtype != target.dtype:
        array = array.astype(target.dtype)
    sharding = getattr(target, "sharding", None)
    if sharding is not None and array.sharding != sharding:
        array = jax.device_put(array, sharding)
    return array


def _load_named_params(step_dir: Path, wanted: dict[str, Any]) -> dict[str, jax.Array]:
    """Reads just the named parameters, each straight into its target's sharding and dtype."""
    abandoned_reads.drop_stray_completions()
    if not wanted:
        return {}
    default = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
    nested: dict = {}
    for name, leaf in wanted.items():
        node = nested.setdefault("params", {})
        *parents, last = name.split("/")
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = jax.ShapeDtypeStruct(
            leaf.shape, leaf.dtype, sharding=getattr(leaf, "sharding", None) or default
        )
    try:
        restored = ocp.PyTreeCheckpointer().restore(
            Path(step_dir) / STATE,
            args=ocp.args.PyTreeRestore(
                item=nested,
                restore_args=jax.tree.map(
                    lambda x: ocp.ArrayRestoreArgs(
                        sharding=x.sharding, global_shape=x.shape, dtype=x.dtype
                    ),
                    nested,
                ),
                partial_restore=True,
            ),
        )
    except Exception as error:  # noqa: BLE001 - TensorStore and orbax raise many types
        first = (str(error).strip().splitlines() or [type(error).__name__])[0][:300]
        raise CheckpointError(
            f"cannot read the parameters of {step_dir} ({first}); the "
            "checkpoint is damaged: use an earlier checkpoint_<step>"
        ) from None
    return param_names.named_leaves(restored["params"])


def read_arrays(step_dir: Path):
    """Every array of the train state as numpy, in the structure saved (whatever this run's
    state is); CheckpointError when the files cannot be read, i.e. the checkpoint is damaged."""
    abandoned_reads.drop_stray_completions()
    import numpy as np

    state_dir = step_dir / STATE
    try:
        tree = ocp.PyTreeCheckpointHandler().metadata(state_dir).tree
        return ocp.PyTreeCheckpointer().restore(
            state_dir,
            args=ocp.args.PyTreeRestore(
                restore_args=jax.tree.map(lambda _: ocp.RestoreArgs(restore_type=np.ndarray), tree)
            ),
        )
    except Exception as error:  # noqa: BLE001 - TensorStore and orbax raise many types
        first = (str(error).strip().splitlines() or [type(error).__name__])[0][:300]
        raise CheckpointError(f"cannot read the arrays of {step_dir} ({first})") from None


def verify_checkpoint(path: str | Path) -> str:
    """`t5forge checkpoint verify`: the checksums, the metadata and every array of a checkpoint
    (read back as numpy and checked to be finite); CheckpointError naming what is wrong."""
    import numpy as np

    step_dir = resolve_step_dir(path)
    checked = integrity.verify(step_dir)
    stored_param_shapes(step_dir)
    tensors = param_names.named_leaves(read_arrays(step_dir))
    bad = [
        name
        for name, value in tensors.items()
        if np.issubdtype(np.asarray(value).dtype, np.inexact)
        and not np.isfinite(np.asarray(value)).all()
    ]
    if bad:
        raise CheckpointError(
            f"{step_dir} holds non-finite values in {len(bad)} of "
            f"{len(tensors)} tensors (first: {bad[0]})"
        )
    sums = (
        f"{checked} files match their checksums"
        if checked
        else "no checksums recorded (saved before t5forge wrote them)"
    )
    return f"{step_dir}: ok; {sums}, {len(tensors)} tensors read, all finite"
