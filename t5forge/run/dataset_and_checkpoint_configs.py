"""The records a run is described with, under T5X's names (`t5x.utils.DatasetConfig`, ...).

Plain frozen dataclasses: Python callers build them directly, and the command line registers
them with gin under T5X's module names (`utils.DatasetConfig.batch_size = 128`), see
`t5forge.gin_config.gin_registry`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from t5forge.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class DatasetConfig:
    """Which data a run reads and how it batches it (T5X's utils.DatasetConfig).

    `batch_size` is global (all processes together); `pack` concatenates short examples into
    full rows; `module` is imported first, for tasks registered by a user module.
    """

    mixture_or_task_name: str
    task_feature_lengths: Mapping[str, int] | None
    split: str
    batch_size: int
    shuffle: bool = True
    seed: int | None = None
    use_cached: bool = False
    pack: bool = False
    module: str | None = None

    def __post_init__(self):
        if self.batch_size < 1:
            raise ConfigError(f"DatasetConfig.batch_size must be >= 1, got {self.batch_size}")


@dataclasses.dataclass(frozen=True)
class SaveCheckpointConfig:
    """When checkpoints are written and which are kept (T5X's utils.SaveCheckpointConfig).

    With `metric_name_to_monitor` (e.g. 'inference_eval/my_task/accuracy') the best checkpoint
    by that metric is kept too, beyond the `keep` most recent ones.
    """

    period: int = 1000
    keep: int | None = None
    metric_name_to_monitor: str | None = None
    metric_mode: str = "max"
    async_save: bool = True

    def __post_init__(self):
        if self.period < 1:
            raise ConfigError(f"SaveCheckpointConfig.period must be >= 1, got {self.period}")
        if self.metric_mode not in ("max", "min"):
            raise ConfigError(
                f"SaveCheckpointConfig.metric_mode must be 'max' or 'min', not {self.metric_mode!r}"
            )


@dataclasses.dataclass(frozen=True)
class RestoreCheckpointConfig:
    """A checkpoint to start from (T5X's utils.RestoreCheckpointConfig).

    `path` may be a t5forge checkpoint (or model dir), a T5X checkpoint or a Hugging Face
    directory. `mode='all'` (evaluation only) takes every checkpoint_<step> of a model dir.
    `assignment_map` is a list of (regex, replacement or None): None keeps the fresh
    initialisation for matching parameters. `checkpointer_cls` (a class, called with no
    arguments, or an instance) restores the parameters in place of the format readers:
    `t5forge.checkpoints.upcycle.UpcycleCheckpointer` starts a sparse model from a dense
    t5forge checkpoint, as T5X's sparse_upcycle.gin does.
    """

    path: str | None = None
    mode: str = "specific"
    assignment_map: Sequence[tuple[str, str | None]] = ()
    fallback_to_scratch: bool = False
    checkpointer_cls: Any = None

    def __post_init__(self):
        if self.mode not in ("specific", "all", "latest"):
            raise ConfigError(
                f"RestoreCheckpointConfig.mode must be 'specific', 'latest' or "
                f"'all', not {self.mode!r}"
            )


@dataclasses.dataclass(frozen=True)
class CheckpointConfig:
    """Both halves together, as T5X's utils.CheckpointConfig(save=..., restore=...)."""

    save: SaveCheckpointConfig | None = dataclasses.field(default_factory=SaveCheckpointConfig)
    restore: RestoreCheckpointConfig | None = None
