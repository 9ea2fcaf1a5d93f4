"""Checkpoints of a training run: orbax underneath, T5X's `checkpoint_<step>/` on disk.

A checkpoint holds the train state, the data iterator's state (so a resumed run sees exactly
the examples it would have seen) and a small metadata file (step, model config). Saves are
asynchronous (the step loop only waits for the device-to-host copy) and atomic (orbax writes to
a temporary directory and renames it when complete), every file a save wrote is checksummed
(t5forge.checkpoints.integrity), and restore walks back from the newest checkpoint past
any that cannot be read or fails its checksums, moving it aside, so a crash, a full disk or a
flipped bit never costs the whole run.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jax
import orbax.checkpoint as ocp
from orbax.checkpoint.checkpoint_managers import preservation_policy

from t5forge.checkpoints import abandoned_reads, integrity
from t5forge.errors import CheckpointError
from t5forge.models import param_names

logger = logging.getLogger(__name__)

STEP_PREFIX = "checkpoint"
UNFINISHED_SUFFIX = ".orbax-checkpoint-tmp"  # what orbax appends to a save still being written
STATE, DATASET, METADATA = "state", "dataset", "metadata"

AssignmentMap = Sequence[tuple[str, str | None]]


def _remove_unfinished_saves(model_dir: Path) -> None:
    """Deletes the temporary directories of saves a killed run left behind, before returning.

    Orbax's own cleanup runs in a background thread that a run stopping early (a bad input
    file found before the first step) cut off at interpreter exit, printing a traceback.
    """
    if jax.process_index() != 0:
        return  # only the primary process writes (and so removes) the temporary directories
    for unfinished in model_dir.glob(f"{STEP_PREFIX}_*{UNFINISHED_SUFFIX}*"):
        logger.info("removing %s, a save that never finished", unfinished)
        shutil.rmtree(unfinished, ignore_errors=True)


@dataclass
class RestoredCheckpoint:
    """What `restore_latest` hands back: the state plus what the data pipeline and run need."""

    step: int
    state: Any
    dataset_state: dict | None
    metadata: dict
    path: Path


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


def _with_shardings(abstract_tree, shardings):
    """Restore targets: shapes/dtypes from the abstract tree, placement from the shardings."""
    if shardings is None:
        default = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
        return jax.tree.map(
            lambda x: jax.ShapeDtypeStruct(
                x.shape, x.dtype, sharding=getattr(x, "sharding", None) or default
            ),
            abstract_tree,
        )
    return jax.tree.map(
        lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), abstract_tree, shardings
    )


class Checkpointer:
    """Saves and restores `checkpoint_<step>/` directories in a model directory.

    keep: how many of the latest checkpoints to keep (None keeps all). period: save at steps
    divisible by `period`, as T5X does (`save(..., force=True)` saves anyway, e.g. at the end).
    keep_best_metric: also keep the checkpoint with the best value of this metric (as passed
    to `save(metrics=...)`, e.g. 'inference_eval/<task>/accuracy'); best_mode 'max' or 'min'.
    Checkpoints saved without metrics count only for `keep`, and the metrics are stored in
    each checkpoint, so the best one is still known after a restart.
    """

    def __init__(
        self,
        model_dir: str | Path,
        keep: int | None = None,
        period: int = 1000,
        keep_best_metric: str | None = None,
        best_mode: str = "max",
        async_save: bool = True,
    ):
        if best_mode not in ("max", "min"):
            raise CheckpointError(f"best_mode must be 'max' or 'min', not {best_mode!r}")
        if keep is not None and keep < 1:
            raise CheckpointError(f"keep={keep} would delete every checkpoint; use keep >= 1")
        self.model_dir = Path(model_dir).absolute()
        self.damaged: list[int] = []  # steps `restore_latest` skipped as damaged, moved aside
        self.keep_best_metric = keep_best_metric
        policies = [preservation_policy.LatestN(n=keep)]
        best_fn = None
        if keep_best_metric is not None:

            def best_fn(metrics):
                return metrics[keep_best_metric]

            policies.append(
                preservation_policy.BestN(
                    get_metric_fn=best_fn,
                    reverse=best_mode == "min",
                    n=1,
                    keep_checkpoints_without_metrics=False,
                )
            )
        options = ocp.CheckpointManagerOptions(
            best_fn=best_fn,  # makes orbax store each checkpoint's metrics beside it
            best_mode=best_mode,
            should_save_fn=lambda step, _last: step % period == 0,
            step_prefix=STEP_PREFIX,
            enable_async_checkpointing=async_save,
            preservation_policy=preservation_policy.AnyPreservationPolicy(policies),
            cleanup_tmp_directories=False,  # done synchronously below instead
            async_options=ocp.AsyncOptions(post_finalization_callback=self._seal_pending)
            if async_save
            else None,
        )
        self._async = async_save
        self._pending: set[int] = set()
        self._pending_lock = threading.Lock()
        _remove_unfinished_saves(self.model_dir)
        self._manager = ocp.CheckpointManager(
            self.model_dir, options=options, item_names=(STATE, DATASET, METADATA)
        )

    def step_dir(self, step: int) -> Path:
        return self.model_dir / f"{STEP_PREFIX}_{step}"

    def move_aside(self, step: int, suffix: str) -> Path:
        """Renames checkpoint_<step> to checkpoint_<step><suffix> (process 0), so no restore,
        `eval` or `load` takes it; returns where it went."""
        where = self.step_dir(step)
        if jax.process_index() == 0:
            where = integrity.quarantine(where, suffix)
        self._manager.reload()  # orbax caches the step list
        return where

    def all_steps(self) -> list[int]:
        """Steps of finished checkpoints (unfinished temporary directories are never listed)."""
        return sorted(self._manager.all_steps())

    def latest_step(self) -> int | None:
        steps = self.all_steps()
        return steps[-1] if steps else None

    def save(
        self,
        step: int,
        state,
        dataset_state: dict | None = None,
        metadata: dict | None = None,
        metrics: dict | None = None,
        force: bool = False,
    ) -> bool:
        """Starts saving `state` at `step` if the period says so (or `force`); True if it did.

        Returns once the arrays are copied to host memory; the write continues in the
        background, so the caller may donate or overwrite `state` right away.
        """
        if int(step) in self.all_steps():
            # A step on disk is never written again: the run resumed from it or already saved
            # it, and orbax would refuse (StepAlreadyExistsError) after starting the write.
            logger.info("checkpoint %s already exists; not saving it again", self.step_dir(step))
            return False
        if (
            metrics is not None
            and self.keep_best_metric is not None
            and (self.keep_best_metric not in metrics)
        ):
            raise CheckpointError(
                f"metric_name_to_monitor {self.keep_best_metric!r} is not among the evaluation "
                f"metrics ({', '.join(sorted(metrics))}); set "
                "utils.SaveCheckpointConfig.metric_name_to_monitor to one of them"
            )
        items = {
            STATE: ocp.args.StandardSave(state),
            DATASET: ocp.args.JsonSave(dataset_state or {}),
            METADATA: ocp.args.JsonSave({"step": int(step), **(metadata or {})}),
        }
        with self._pending_lock:
            self._pending.add(int(step))
        saved = self._manager.save(
            int(step), args=ocp.args.Composite(**items), metrics=metrics, force=force
        )
        if not saved:
            with self._pending_lock:
                self._pending.discard(int(step))
        elif not self._async:
            self._seal_pending()
        return saved

    def _seal_pending(self) -> None:
        """Checksums the saves that finished writing (orbax calls it before the commit rename,
        so the checksums are committed with the checkpoint; sync saves are sealed in place)."""
        if jax.process_index() != 0:
            return
        with self._pending_lock:
            for step in sorted(self._pending):
                final = self.step_dir(step)
                written = (
                    [final]
                    if final.is_dir()
                    else sorted(self.model_dir.glob(f"{final.name}{UNFINISHED_SUFFIX}*"))
                )
                if written:
                    integrity.seal(written[0])
                    self._pending.discard(step)

    def wait_until_finished(self) -> None:
        """Blocks until background saves are on disk (call before exiting or evaluating them)."""
        self._manager.wait_until_finished()

    def close(self) -> None:
        self._manager.close()

    def restore(self, step: int, abstract_state, shardings=None) -> RestoredCheckpoint:
        """Restores one step straight into the given shardings (no host-side full copy), after
        checking its files against the checksums recorded when it was saved."""
        abandoned_reads.drop_stray_completions()
        integrity.verify(self.step_dir(step))
        target = _with_shardings(abstract_state, shardings)
        restored = self._manager.restore(
            int(step),
            args=ocp.args.Composite(
                **{
                    STATE: ocp.args.StandardRestore(target),
                    DATASET: ocp.args.JsonRestore(),
                    METADATA: ocp.args.JsonRestore(),
                }
            ),
        )
        state_step = getattr(restored[STATE], "step", None)
        if state_step is not None and int(jax.device_get(state_step)) != int(step):
            raise CheckpointError(
                f"{self.step_dir(step)} holds a train state of step "
                f"{int(jax.device_get(state_step))}, not {step}"
            )
        return RestoredCheckpoint(
            step=int(step),
            state=restored[STATE],
            dataset_state=restored[DATASET] or None,
            metadata=restored[METADATA] or {},
            path=self.step_dir(step),
        )

    def restore_latest(self, abstract_state, shardings=None) -> RestoredCheckpoint | None:
        """The newest checkpoint that restores; None when the directory has no checkpoints.

        A checkpoint that fails to read (truncated, deleted or changed files, missing metadata)
        is skipped with a one-line warning naming it, moved aside to checkpoint_<step>.corrupt,
        and the previous one is tried.
        """
        self.wait_until_finished()
        steps = self.all_steps()
        abstract_params = _params_of(abstract_state)
        for step in reversed(steps):
            try:
                verified = integrity.verify(self.step_dir(step))
                stored = _stored_param_shapes(self.step_dir(step)) if abstract_params else None
            except CheckpointError as error:
                self._skip_damaged(step, error)
                continue
            if stored is not None:
                _check_shapes(self.step_dir(step), stored, abstract_params)  # wrong model: fail
            try:
                return self.restore(step, abstract_state, shardings)
            except Exception as error:  # noqa: BLE001 - TensorStore and orbax raise many types
                if not verified:  # no checksums to tell damage from a mismatch: read the arrays
                    try:
                        _read_arrays(self.step_dir(step))
                    except CheckpointError as damage:
                        self._skip_damaged(step, damage)
                        continue
                # The files are as saved: the run's state differs, nothing is damaged.
                first = (str(error).strip().splitlines() or [type(error).__name__])[0][:300]
                raise CheckpointError(
                    f"{self.step_dir(step)} does not fit this run's train state ({first}); "
                    "resume with the optimizer and model it was trained with, or start a "
                    "new MODEL_DIR from it with INITIAL_CHECKPOINT_PATH"
                ) from None
        if steps:
            raise CheckpointError(
                f"no readable checkpoint in {self.model_dir} (tried steps {steps}); "
                "restore a backup or start from a fresh MODEL_DIR"
            )
        return None

    def _skip_damaged(self, step: int, error: Exception) -> None:
        """Warns naming the damage and moves the checkpoint aside (process 0 renames it)."""
        self.damaged.append(step)
        lines = str(error).strip().splitlines()
        where = self.step_dir(step)
        if where.is_dir():
            where = self.move_aside(step, integrity.CORRUPT_SUFFIX)
        logger.warning(
            "skipping unreadable checkpoint %s%s (%s: %s)",
            self.step_dir(step),
            f", moved to {where.name}" if where != self.step_dir(step) else "",
            type(error).__name__,
            lines[0][:300] if lines else "",
        )

    def check_matches(self, abstract_params) -> None:
        """Fails early if this directory's newest readable checkpoint was made for a different
        model (unreadable ones are left for `restore_latest` to skip)."""
        for step in reversed(self.all_steps()):
            try:
                stored = _stored_param_shapes(self.step_dir(step))
            except CheckpointError:
                continue
            _check_shapes(self.step_dir(step), stored, abstract_params)
            return


def _stored_param_shapes(step_dir: Path) -> dict[str, tuple[int, ...]]:
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


def _params_of(abstract_state):
    """The params subtree of a train state (attribute or dict key), else None."""
    if isinstance(abstract_state, dict):
        return abstract_state.get("params")
    return getattr(abstract_state, "params", None)


def check_params_match(step_dir: Path, abstract_params) -> None:
    """CheckpointError naming the first parameter whose name or shape differs from the model."""
    _check_shapes(step_dir, _stored_param_shapes(step_dir), abstract_params)


def _check_shapes(step_dir: Path, stored: dict[str, tuple[int, ...]], abstract_params) -> None:
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
    stored = _stored_param_shapes(step_dir)
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


def _read_arrays(step_dir: Path):
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
    _stored_param_shapes(step_dir)
    tensors = param_names.named_leaves(_read_arrays(step_dir))
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
