"""T5X's contrib/moe: the run files' partitioner, trainer and checkpointer, the model files'
model, each forwarding to t5forge's namesake (partitioning.MoePjitPartitioner,
trainer.MoeTrainer, checkpoints.UpcycleCheckpointer); their rules are the dense names' plus
the mixture-of-experts parameters. (See names.py for what an entry is.)
"""

from __future__ import annotations

import dataclasses

from t5forge.gin_config.t5x_compat import flaxformer_objects, objects
from t5forge.gin_config.t5x_compat.flaxformer_names import MOE
from t5forge.gin_config.t5x_compat.model_names import MODELS
from t5forge.gin_config.t5x_compat.name_entry import T5XName
from t5forge.gin_config.t5x_compat.rules import field, keep, move
from t5forge.gin_config.t5x_compat.training_names import PARTITIONING, TRAINER

T5X_MOE = "t5x.contrib.moe"

# The dense names the MoE ones extend.
_DENSE = {entry.t5x_path: entry for entry in (*MODELS, *PARTITIONING, *TRAINER)}

MOE_NAMES: tuple[T5XName, ...] = (
    T5XName(
        f"{T5X_MOE}.models",
        "MoeEncoderDecoderModel",
        twin="models.Model",
        rules={
            **_DENSE["t5x.models.EncoderDecoderModel"].rules,
            "aux_loss_factor": field("aux_loss_factor", feature=MOE),
            "router_z_loss_factor": field("router_z_loss_factor", feature=MOE),
        },
    ),
    dataclasses.replace(
        _DENSE["t5x.models.EncoderDecoderModel.predict_batch_with_aux"],
        module=f"{T5X_MOE}.models",
        build=objects.configured_elsewhere(
            "models.MoeEncoderDecoderModel.predict_batch_with_aux", "its num_decodes"
        ),
    ),
    T5XName(
        f"{T5X_MOE}.partitioning",
        "MoePjitPartitioner",
        twin="partitioning.MoePjitPartitioner",
        rules={
            **{
                p: dataclasses.replace(rule, feature=MOE) if rule.move_to else rule
                for p, rule in _DENSE["t5x.partitioning.PjitPartitioner"].rules.items()
            },
            "num_expert_partitions": move(feature=MOE),
        },
    ),
    T5XName(
        f"{T5X_MOE}.partitioning",
        "compute_num_model_partitions",
        build=flaxformer_objects.compute_num_model_partitions,
        rules={"num_model_partitions": keep(), "model_parallel_submesh": keep()},
    ),
    T5XName(
        f"{T5X_MOE}.trainer",
        "MoeTrainer",
        build=objects.configured_elsewhere(
            "moe_trainer.MoeTrainer", "train.trainer_cls = @moe_trainer.MoeTrainer"
        ),
        rules={
            **_DENSE["t5x.trainer.Trainer"].rules,
            "num_expert_partitions": move("trainer.MoeTrainer.num_expert_partitions", feature=MOE),
        },
    ),
    T5XName(
        f"{T5X_MOE}.adafactor_utils",
        "logical_factor_rules",
        build=objects.standard_logical_factor_rules,
    ),
    T5XName(
        f"{T5X_MOE}.checkpoints",
        "UpcycleCheckpointer",
        build=objects.configured_elsewhere(
            "checkpoints.UpcycleCheckpointer", "utils.RestoreCheckpointConfig.checkpointer_cls"
        ),
        rules={"num_experts": move("checkpoints.UpcycleCheckpointer.num_experts", feature=MOE)},
    ),
)
