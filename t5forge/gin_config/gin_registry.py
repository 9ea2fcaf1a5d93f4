"""Every name gin files may bind, registered under T5X's module names (T5Config aside, below).

The library (t5forge.run, t5forge.training, t5forge.models) is plain Python and knows nothing
of gin; this module wraps its callables as gin configurables so that T5X-style files work:
`train.model = %MODEL`, `utils.DatasetConfig.batch_size = 128`,
`partitioning.PjitPartitioner.num_partitions = 2`, `adafactor.Adafactor`,
`utils.create_learning_rate_scheduler.factors = 'constant'`, `MODEL = @models.Model()`.
The command line calls the wrapped versions (`gin_registry.train()`), so bindings apply there
and never to a Python caller's direct `t5forge.train(...)`. T5Config alone is registered in
t5forge.interop.gin_model_config, because `t5forge.load(config=<gin file>)` reads it too.
"""

from __future__ import annotations

import gin

from t5forge.checkpoints import upcycle
from t5forge.interop.gin_model_config import config_from_gin
from t5forge.models.configs import T5Config
from t5forge.models.model import DecoderOnlyModel, EncoderDecoderModel, build_model
from t5forge.run import dataset_and_checkpoint_configs as configs
from t5forge.run.evaluate import evaluate as run_evaluate
from t5forge.run.infer import infer as run_infer
from t5forge.run.precompile import precompile as run_precompile
from t5forge.run.train import train as run_train
from t5forge.training import moe_trainer, optimizers, partitioning, schedules


def _model(
    config: T5Config | None = None,
    z_loss: float = 1e-4,
    label_smoothing: float = 0.0,
    loss_normalizing_factor=None,
):
    """The model the gin files describe, encoder-decoder or decoder-only by its config.

    `config` defaults to the T5Config bound by the model gin file (`T5Config.emb_dim = ...`).
    """
    return build_model(
        config or config_from_gin(),
        z_loss=z_loss,
        label_smoothing=label_smoothing,
        loss_normalizing_factor=loss_normalizing_factor,
    )


# T5X's run records and partitioner.
DatasetConfig = gin.external_configurable(configs.DatasetConfig, module="utils")
SaveCheckpointConfig = gin.external_configurable(configs.SaveCheckpointConfig, module="utils")
RestoreCheckpointConfig = gin.external_configurable(configs.RestoreCheckpointConfig, module="utils")
CheckpointConfig = gin.external_configurable(configs.CheckpointConfig, module="utils")
PjitPartitioner = gin.external_configurable(partitioning.PjitPartitioner, module="partitioning")

# Mixture of experts, as T5X's contrib/moe run files bind them (docs/expert-parallelism.md):
# `train.partitioner = @partitioning.MoePjitPartitioner()`, `train.trainer_cls =
# @trainer.MoeTrainer` and, for sparse upcycling, `utils.RestoreCheckpointConfig.checkpointer_cls
# = @checkpoints.UpcycleCheckpointer`.
gin.external_configurable(partitioning.MoePjitPartitioner, module="partitioning")
gin.external_configurable(moe_trainer.MoeTrainer, module="trainer")
gin.external_configurable(upcycle.UpcycleCheckpointer, module="checkpoints")

# Models: `MODEL = @models.Model()` picks the architecture from the bound T5Config.
Model = gin.external_configurable(_model, name="Model", module="models")
gin.external_configurable(EncoderDecoderModel, module="models")
gin.external_configurable(DecoderOnlyModel, module="models")

# Optimizers and schedules.
gin.external_configurable(optimizers.adafactor, name="Adafactor", module="adafactor")
gin.external_configurable(optimizers.adamw, name="adamw", module="optimizers")
create_learning_rate_scheduler = gin.external_configurable(
    schedules.create_learning_rate_scheduler, module="utils"
)

# The three run functions, under the names the run gin files bind (`train.model = %MODEL`).
train = gin.external_configurable(run_train, name="train")
evaluate = gin.external_configurable(run_evaluate, name="evaluate")
infer = gin.external_configurable(run_infer, name="infer")
# T5X's precompile.gin (`train_script.precompile`): `t5forge train` compiles and exits.
precompile = gin.external_configurable(run_precompile, name="precompile")


def precompile_requested() -> bool:
    """Whether the files bind precompile (T5X's precompile.gin), which train then runs."""
    from t5forge.gin_config import gin_internals

    return bool(gin_internals.bindings_of(gin_internals.complete_selector("precompile")))
