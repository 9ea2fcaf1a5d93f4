"""The library layer behind the commands: training, evaluation and inference (T5X's
train/eval/infer), task caches (SeqIO's cache_tasks) and checkpoint conversion.

`cli/` parses flags and gin and calls these; Python callers use them directly:

    from t5forge.run import DatasetConfig, train
    train(model="t5_1_1/small", model_dir="/tmp/run", total_steps=1000,
          train_dataset_cfg=DatasetConfig("my_task", {"inputs": 512, "targets": 114},
                                          "train", batch_size=32))
"""

from t5forge.run.cache_tasks import cache_tasks
from t5forge.run.convert import convert
from t5forge.run.dataset_and_checkpoint_configs import (
    CheckpointConfig,
    DatasetConfig,
    RestoreCheckpointConfig,
    SaveCheckpointConfig,
)
from t5forge.run.evaluate import evaluate
from t5forge.run.hooks import EarlyStopping, Every, Hook, RunContext
from t5forge.run.infer import infer
from t5forge.run.train import train
from t5forge.training.partitioning import PjitPartitioner
from t5forge.training.trainer import Trainer

__all__ = [
    "CheckpointConfig",
    "DatasetConfig",
    "EarlyStopping",
    "Every",
    "Hook",
    "PjitPartitioner",
    "RestoreCheckpointConfig",
    "RunContext",
    "SaveCheckpointConfig",
    "Trainer",
    "cache_tasks",
    "convert",
    "evaluate",
    "infer",
    "train",
]
