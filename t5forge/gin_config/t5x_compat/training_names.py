"""T5X's partitioner, trainer and optimizers: `t5x.partitioning`, `t5x.trainer`,
`t5x.adafactor` and `t5x.optimizers`, forwarding to t5forge's PjitPartitioner, train step
settings and optimizers. (See names.py for what an entry is.)
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping

from t5forge.gin_config.t5x_compat import objects
from t5forge.gin_config.t5x_compat.name_entry import T5XName
from t5forge.gin_config.t5x_compat.rules import (
    FLOAT32,
    TF_ONLY,
    equivalent,
    honoured,
    keep,
    move,
    reference,
    resolve_macros,
)

PARTITIONER = "use partitioning.PjitPartitioner.num_partitions (or mesh_shape=(data, model))"


def partitioner_bindings() -> Iterator[Mapping]:
    """The parameters bound to each PjitPartitioner of the config (T5X's or t5forge's, any
    scope)."""
    from t5forge.gin_config import gin_internals

    for (_, selector), params in gin_internals.all_bindings().items():
        if selector.endswith("PjitPartitioner"):
            yield params


def _submesh_size(submesh) -> int | None:
    """Devices in T5X's model-parallel submesh (x, y, z, core): the model axis' size."""
    return math.prod(submesh) if submesh else None


def _partitions(num_partitions):
    """T5X's PjitPartitioner takes its mesh from model_parallel_submesh when one is set, and
    from num_partitions otherwise; t5forge's model axis gets that many devices."""
    for params in partitioner_bindings():
        if "model_parallel_submesh" in params:
            size = _submesh_size(resolve_macros(params["model_parallel_submesh"]))
            if size:
                return size
    return num_partitions


_PARTITIONER_COMMON = {
    "params_on_devices": honoured(True, warn="parameters always live on the devices"),
    "backend": honoured(None, warn="t5forge uses JAX's default backend"),
}

PARTITIONING: tuple[T5XName, ...] = (
    T5XName(
        "t5x.partitioning",
        "PjitPartitioner",
        twin="partitioning.PjitPartitioner",
        rules={
            "num_partitions": move(convert=_partitions),
            "model_parallel_submesh": move(
                ".num_partitions", convert=lambda v: _submesh_size(v) or 1
            ),
            "logical_axis_rules": move(),
            **_PARTITIONER_COMMON,
            "ici_mesh_shape": honoured(None, refuse=PARTITIONER),
            "dcn_mesh_shape": honoured(None, refuse=PARTITIONER),
        },
    ),
    T5XName(
        "t5x.partitioning",
        "ModelBasedPjitPartitioner",
        build=objects.model_based_pjit_partitioner,
        rules={
            "num_partitions": keep(),
            "logical_axis_rules": keep(),
            "model_parallel_submesh": honoured(None, (), refuse=PARTITIONER),
            **_PARTITIONER_COMMON,
        },
    ),
    T5XName(
        "t5x.partitioning",
        "standard_logical_axis_rules",
        build=objects.standard_logical_axis_rules,
        rules={
            "activation_partitioning_dims": honoured(1, refuse=PARTITIONER),
            "parameter_partitioning_dims": honoured(1, refuse=PARTITIONER),
            "additional_rules": keep(),
        },
    ),
)

TRAINER: tuple[T5XName, ...] = (
    T5XName(
        "t5x.trainer",
        "Trainer",
        build=objects.configured_elsewhere(
            "trainer.Trainer", "train.trainer_cls = @trainer.Trainer"
        ),
        rules={
            "num_microbatches": move(  # T5X: None and 0 both mean one batch, unsplit
                "train.num_microbatches", convert=lambda v: v or 1
            ),
            "learning_rate_fn": move("train.learning_rate_fn"),
            "weight_metrics_computer": honoured(None, warn="weight-norm summaries are not written"),
        },
    ),
    T5XName(
        "t5x.trainer",
        "WeightMetricsComputer",
        build=objects.configured_elsewhere(
            "trainer.WeightMetricsComputer", "trainer.Trainer.weight_metrics_computer"
        ),
    ),
    T5XName(
        "t5x.trainer",
        "TerminateOnNanAction",
        build=objects.TerminateOnNanAction,
        rules={"task": keep(), "metric": keep()},
    ),
)

ADAFACTOR: tuple[T5XName, ...] = (
    T5XName(
        "t5x.adafactor",
        "Adafactor",
        twin="adafactor.Adafactor",
        returns_twin=True,
        rules={
            **{
                p: move()
                for p in (
                    "factored",
                    "multiply_by_parameter_scale",
                    "beta1",
                    "decay_rate",
                    "clipping_threshold",
                    "min_dim_size_to_factor",
                    "epsilon1",
                    "epsilon2",
                    "global_norm_clip_threshold",
                )
            },
            "learning_rate": honoured(
                None, warn="the rate comes from trainer.Trainer.learning_rate_fn"
            ),
            "step_offset": honoured(
                0, refuse="use utils.create_learning_rate_scheduler.step_offset"
            ),
            "logical_factor_rules": reference(
                "t5x.adafactor.standard_logical_factor_rules",
                "t5x.contrib.moe.adafactor_utils.logical_factor_rules",
                refuse="t5forge factors by its standard rules",
            ),
            "weight_decay_rate": honoured(None, refuse="use optimizers.adamw for weight decay"),
            "weight_decay_rate_lr_exponent": honoured(None, refuse="use optimizers.adamw"),
            "dtype_momentum": honoured("float32", warn=FLOAT32),
            "factor_map": reference(
                None, "t5x.adafactor.HParamMap", refuse="t5forge factors by logical axes"
            ),
            "max_parameter_scale": honoured(None, refuse=TF_ONLY),
            "skip_nan_updates": honoured(False, warn="use trainer.TerminateOnNanAction"),
        },
    ),
    T5XName(
        "t5x.adafactor",
        "standard_logical_factor_rules",
        build=objects.standard_logical_factor_rules,
    ),
    # Flaxformer's scanned MoE overlay (moe/runs/scan.gin): T5X's factoring by parameter name,
    # scanned layers as a batch axis; t5forge's logical axes already factor them that way.
    T5XName(
        "t5x.adafactor",
        "HParamMap",
        build=objects.configured_elsewhere("adafactor.HParamMap", "adafactor.Adafactor.factor_map"),
        rules={
            "rules": reference(
                "t5x.adafactor.standard_factor_rules",
                refuse="t5forge factors by its logical axis rules",
            )
        },
    ),
    T5XName(
        "t5x.adafactor",
        "standard_factor_rules",
        build=objects.configured_elsewhere(
            "adafactor.standard_factor_rules", "adafactor.HParamMap.rules"
        ),
        rules={"scan_layers": equivalent()},  # a scanned `layers` axis is factored as a batch
    ),
)

# optax's transformations are gin's own `import optax`.
OPTIMIZERS: tuple[T5XName, ...] = (
    T5XName(
        "t5x.optimizers",
        "chain",
        build=objects.optax_chain,
        rules={"transformations": keep()},
    ),
)
