"""Checkpoints of a training run: orbax underneath, T5X's `checkpoint_<step>/` on disk.

A checkpoint holds the train state, the data iterator's state (so a resumed run sees exactly
the examples it would have seen) and a small metadata file (step, model config). Saves are
asynchronous (the step loop only waits for the device-to-host copy) and atomic (orbax writes to
a temporary directory and renames it when complete), every file a save wrote is checksummed
(t5forge.checkpoints.integrity), and restore walks back from the newest checkpoint past
any that cannot be read or fails its checksums, moving it aside, so a crash, a full disk or a
flipped bit never costs the whole run. Reading one step directory (its metadata, its
parameters by name, a verify) is t5forge.checkpoints.step_dir.
"""

from __future__ import annotations

import logging
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import orbax.checkpoint as ocp
from orbax.checkpoint.checkpoint_managers import preservation_policy

from t5forge.checkpoints import abandoned_reads, integrity
from t5forge.checkpoints.step_dir import (
    DATASET,
    METADATA,
    STATE,
    STEP_PREFIX,
    check_shapes,
    read_arrays,
    stored_param_shapes,
)
from t5forge.errors import CheckpointError

logger = logging.getLogger(__name__)

UNFINISHED_SUFFIX = ".orbax-checkpoint-tmp"  # what orbax appends to a save still being written


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
                stored = stored_param_shapes(self.step_dir(step)) if abstract_params else None
            except CheckpointError as error:
                self._skip_damaged(step, error)
                continue
            if stored is not None:
                check_shapes(self.step_dir(step), stored, abstract_params)  # wrong model: fail
            try:
                return self.restore(step, abstract_state, shardings)
            except Exception as error:  # noqa: BLE001 - TensorStore and orbax raise many types
                if not verified:  # no checksums to tell damage from a mismatch: read the arrays
                    try:
                        read_arrays(self.step_dir(step))
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
                stored = stored_param_shapes(self.step_dir(step))
            except CheckpointError:
                continue
            check_shapes(self.step_dir(step), stored, abstract_params)
            return


def _params_of(abstract_state):
    """The params subtree of a train state (attribute or dict key), else None."""
    if isinstance(abstract_state, dict):
        return abstract_state.get("params")
    return getattr(abstract_state, "params", None)
