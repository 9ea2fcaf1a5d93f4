"""Pieces train, evaluate and infer assemble the same way: the model, its parameters, metadata.

Kept in one place so the three build the model and load parameters from a checkpoint
identically: a checkpoint evaluated by `evaluate` is exactly the one `train` wrote.
"""

from __future__ import annotations

import logging
from pathlib import Path

import jax
import numpy as np

from t5forge.errors import CheckpointError, ConfigError
from t5forge.models.configs import T5Config, get_config
from t5forge.models.model import BaseModel, build_model
from t5forge.run.configs import RestoreCheckpointConfig
from t5forge.training import checkpoints

logger = logging.getLogger("t5forge")


def resolve_model(model):
    """A model from a model object, a T5Config or a preset name ('t5_1_1/small')."""
    if isinstance(model, str):
        return build_model(get_config(model))
    if isinstance(model, T5Config):
        return build_model(model)
    if not isinstance(model, BaseModel):
        raise ConfigError(f"model must be a t5forge model, a T5Config or a preset name, "
                          f"not {model!r}")
    return model


def register_tasks(*dataset_cfgs) -> None:
    """The built-in tasks and each config's `module` (user tasks), before a name is looked up."""
    from t5forge.run.task_modules import import_task_modules

    import_task_modules([cfg.module for cfg in dataset_cfgs if cfg is not None and cfg.module])


def _read_foreign_params(path: Path):
    """Params (numpy, T5X names) from a T5X checkpoint or a Hugging Face directory, else None."""
    from t5forge.interop import huggingface, t5x

    if (path / "config.json").is_file():
        return huggingface.load_hf_dir(path)[1]
    if t5x.is_t5x_checkpoint(path):
        return t5x.load_t5x_checkpoint(path)[0]
    return None


def load_params(path: str, model, target_params=None, assignment_map=()):
    """Parameters for `model` from a t5forge, T5X or Hugging Face checkpoint.

    `target_params` (freshly initialised, maybe sharded) is needed for a partial restore with
    an assignment map; the report says what was restored and what stayed fresh.
    """
    location = Path(path)
    if not location.exists():
        raise CheckpointError(f"checkpoint path {path} does not exist; check INITIAL_CHECKPOINT_PATH / CHECKPOINT_PATH")
    foreign = _read_foreign_params(location)
    if foreign is not None:
        model.check_params_match(foreign)
        return jax.tree.map(np.asarray, foreign), f"loaded every parameter from {path}"
    target = model.abstract_params() if target_params is None else target_params
    params, report = checkpoints.restore_params(location, target, assignment_map)
    return params, report.summary()


def restore_config_params(cfg: RestoreCheckpointConfig | None, model, fresh_params=None):
    """(params, message) from a RestoreCheckpointConfig, or (None, None) if it names no path."""
    if cfg is None or not cfg.path:
        return None, None
    try:
        return load_params(cfg.path, model, fresh_params, cfg.assignment_map)
    except CheckpointError:
        if cfg.fallback_to_scratch:
            logger.warning("could not restore %s; starting from scratch", cfg.path)
            return None, None
        raise


def model_metadata(model, mixture_or_task_name: str, model_dir: Path) -> dict:
    """What a checkpoint records so `t5forge.load` needs nothing else: the model config and
    the vocabulary (copied into the model dir as spiece.model, with its extra_ids)."""
    import dataclasses
    import shutil

    from t5forge.data.tasks import get_mixture_or_task

    metadata = {"model_config": dataclasses.asdict(model.config)}
    features = get_mixture_or_task(mixture_or_task_name).output_features
    vocabulary = features["targets"].vocabulary
    if vocabulary.vocab_size > model.config.vocab_size:
        raise ConfigError(
            f"the task's vocabulary has {vocabulary.vocab_size} ids but the model's vocab_size is "
            f"{model.config.vocab_size}; set T5Config.vocab_size >= {vocabulary.vocab_size}")
    vocab_path = getattr(vocabulary, "path", None)  # known once the vocabulary is loaded
    if vocab_path and Path(vocab_path).is_file():
        target = Path(model_dir) / "spiece.model"
        if jax.process_index() == 0 and not target.exists():
            shutil.copyfile(vocab_path, target)
        metadata["vocabulary"] = {"path": "spiece.model", "extra_ids": vocabulary.extra_ids}
    return metadata
