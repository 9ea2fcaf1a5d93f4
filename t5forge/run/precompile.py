"""T5X's precompile (`t5x/configs/runs/precompile.gin`): compile the train step for the run's
shapes and exit without training, so a bad configuration or an out-of-memory step shows up
before a job holds its accelerators for hours.

As in T5X's `precompile`: one batch of the task is read for the shapes, the train state stays
abstract (no parameter is initialised), the step is T5X's (the model's optimizer, a constant
learning rate of 1e-3, no microbatches), and MODEL_DIR receives the compiled step's HLO
(`train_step.hlo.txt`: XLA's text, where T5X writes serialized protos read by Google's tools).
With JAX's compilation cache set, a training run of the same step then skips the compile.
"""

from __future__ import annotations

import sys

from t5forge import storage
from t5forge.run import setup
from t5forge.run.dataset_and_checkpoint_configs import DatasetConfig
from t5forge.training import optimizers, schedules
from t5forge.training.partitioning import PjitPartitioner
from t5forge.training.trainer import Trainer

HLO_FILE = "train_step.hlo.txt"
LEARNING_RATE = 1e-3  # T5X's precompile compiles train_with_lr at this rate


def precompile(
    *,
    model,
    train_dataset_cfg: DatasetConfig,
    model_dir: str,
    partitioner: PjitPartitioner | None = None,
    random_seed: int | None = None,
    optimizer=optimizers.adafactor,
) -> str:
    """Compiles the train step for `train_dataset_cfg`'s batches; returns the HLO file."""
    model = setup.resolve_model(model)
    setup.register_tasks(train_dataset_cfg)
    partitioner = partitioner or PjitPartitioner()
    partitioner.check_batch_divisible(train_dataset_cfg.batch_size)
    seed = 42 if random_seed is None else random_seed  # T5X: `random_seed or 42`
    rate = schedules.create_learning_rate_scheduler("constant", LEARNING_RATE)
    tx = setup.make_optimizer(optimizer, rate, model.param_logical_axes())
    trainer = Trainer(model, tx, partitioner, rate, 1, seed)
    batch = next(setup.training_batches(model, train_dataset_cfg, seed, shuffle=False))
    compiled = trainer.compile_train_step(trainer.abstract_state(), batch)
    storage.make_directory(model_dir, "MODEL_DIR")
    path = storage.path(model_dir) / HLO_FILE
    storage.write_atomically(path, compiled.as_text())
    shapes = {k: tuple(v.shape) for k, v in batch.items()}
    print(f"compiled the train step for batches {shapes}; HLO in {path}", file=sys.stderr)
    return str(path)
