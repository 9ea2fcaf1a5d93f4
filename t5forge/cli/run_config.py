"""The gin-configurable records a run is described with, under T5X's names.

They are registered in gin's `utils` and `partitioning` modules, as in T5X, so a T5X user's
bindings (`utils.DatasetConfig.batch_size = 128`, `utils.SaveCheckpointConfig.period = 1000`,
`partitioning.PjitPartitioner.num_partitions = 2`) work unchanged; the short forms
(`DatasetConfig.batch_size`) work too.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import gin

from t5forge.errors import ConfigError


@gin.configurable(module="utils")
@dataclasses.dataclass(frozen=True)
class DatasetConfig:
    """Which data a run reads and how it batches it (T5X's utils.DatasetConfig)."""

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


@gin.configurable(module="utils")
@dataclasses.dataclass(frozen=True)
class SaveCheckpointConfig:
    """When checkpoints are written and which are kept (T5X's utils.SaveCheckpointConfig)."""

    period: int = 1000
    keep: int | None = None
    metric_name_to_monitor: str | None = None
    metric_mode: str = "max"
    async_save: bool = True


@gin.configurable(module="utils")
@dataclasses.dataclass(frozen=True)
class RestoreCheckpointConfig:
    """A checkpoint to start from (T5X's utils.RestoreCheckpointConfig).

    `path` may be a t5forge checkpoint (or model dir), a T5X checkpoint or a Hugging Face
    directory. `assignment_map` is a list of (regex, replacement or None): None keeps the fresh
    initialisation for matching parameters.
    """

    path: str | None = None
    mode: str = "specific"
    assignment_map: Sequence[tuple[str, str | None]] = ()
    fallback_to_scratch: bool = False


@gin.configurable(module="partitioning")
@dataclasses.dataclass(frozen=True)
class PjitPartitioner:
    """The device mesh and how logical axes map onto it (T5X's partitioning.PjitPartitioner)."""

    num_partitions: int = 1
    mesh_shape: tuple[int, int] | None = None
    fsdp: bool = False
    logical_axis_rules: Sequence[tuple[str, str | None]] = ()
