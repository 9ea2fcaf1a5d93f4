"""Pieces train, evaluate and infer assemble the same way: the model, its parameters, metadata.

Kept in one place so the three build the model and load parameters from a checkpoint
identically: a checkpoint evaluated by `evaluate` is exactly the one `train` wrote.
"""

from __future__ import annotations

import inspect
import logging
from pathlib import Path

import jax

from t5forge.checkpoints import reader
from t5forge.data.feature_converters import converter_for
from t5forge.errors import CheckpointError, ConfigError
from t5forge.models.configs import T5Config
from t5forge.models.model import BaseModel, build_model
from t5forge.models.presets import get_config
from t5forge.run import output_identity
from t5forge.run.dataset_and_checkpoint_configs import DatasetConfig, RestoreCheckpointConfig
from t5forge.training import optimizers

logger = logging.getLogger("t5forge")


def resolve_model(model):
    """A model from a model object, a T5Config or a preset name ('t5_1_1/small')."""
    if isinstance(model, str):
        return build_model(get_config(model))
    if isinstance(model, T5Config):
        return build_model(model)
    if not isinstance(model, BaseModel):
        raise ConfigError(
            f"model must be a t5forge model, a T5Config or a preset name, not {model!r}"
        )
    return model


def register_tasks(*dataset_cfgs) -> None:
    """The built-in tasks and each config's `module` (user tasks), before a name is looked up."""
    from t5forge.run.task_modules import import_task_modules

    import_task_modules([cfg.module for cfg in dataset_cfgs if cfg is not None and cfg.module])


def load_params(path: str, model, target_params=None, assignment_map=()):
    """(params for `model`, what was restored) from any checkpoint `checkpoints.reader` reads.

    `target_params` (freshly initialised, maybe sharded) is needed for a partial restore with
    an assignment map; the report says what was restored and what stayed fresh.
    """
    if target_params is None:
        target_params = model.abstract_params()
    checkpoint = reader.read(
        path, model.config, target_params=target_params, assignment_map=assignment_map
    )
    return checkpoint.params, checkpoint.report


def restore_config_params(cfg: RestoreCheckpointConfig | None, model, fresh_params=None):
    """(params, message) from a RestoreCheckpointConfig, or (None, None) if it names no path.

    A config's `checkpointer_cls` (sparse upcycling) restores into `fresh_params` itself.
    """
    if cfg is None or not cfg.path:
        return None, None
    try:
        if cfg.checkpointer_cls is not None:
            restorer = cfg.checkpointer_cls
            restorer = restorer() if isinstance(restorer, type) else restorer
            params, report = restorer.restore_params(cfg.path, fresh_params, cfg.assignment_map)
            return params, f"{report.summary()} of {cfg.path}"
        return load_params(cfg.path, model, fresh_params, cfg.assignment_map)
    except CheckpointError:
        if cfg.fallback_to_scratch:
            logger.warning("could not restore %s; starting from scratch", cfg.path)
            return None, None
        raise


def model_metadata(model, dataset_cfg, model_dir: Path) -> dict:
    """What a checkpoint records so `t5forge.load` needs nothing else and a resume can check it
    continues the same run: the model config, the vocabulary (copied into the model dir as
    spiece.model, with its extra_ids and SHA-256) and the data settings."""
    import dataclasses
    import shutil

    from t5forge.data.providers.mixture import get_mixture_or_task

    metadata = {
        "model_config": dataclasses.asdict(model.config),
        "mixture_or_task_name": dataset_cfg.mixture_or_task_name,
        "task_feature_lengths": dict(dataset_cfg.task_feature_lengths),
        "batch_size": int(dataset_cfg.batch_size),
        "data_files": output_identity.data_fingerprint(
            get_mixture_or_task(dataset_cfg.mixture_or_task_name).tasks,
            dataset_cfg.split,
            dataset_cfg.use_cached,
        ),
    }
    features = get_mixture_or_task(dataset_cfg.mixture_or_task_name).output_features
    vocabulary = features["targets"].vocabulary
    if vocabulary.vocab_size > model.config.vocab_size:
        raise ConfigError(
            f"the task's vocabulary has {vocabulary.vocab_size} ids but the model's vocab_size is "
            f"{model.config.vocab_size}; set T5Config.vocab_size >= {vocabulary.vocab_size}"
        )
    vocab_path = getattr(vocabulary, "model_file", None)  # known once the vocabulary is loaded
    if vocab_path and Path(vocab_path).is_file():
        target = Path(model_dir) / "spiece.model"
        if jax.process_index() == 0 and not target.exists():
            shutil.copyfile(vocab_path, target)
        metadata["vocabulary"] = {
            "path": "spiece.model",
            "extra_ids": vocabulary.extra_ids,
            "sha256": _sha256(Path(vocab_path)),
            "source": str(vocab_path),
        }
    return metadata


def _sha256(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def check_resume(recorded: dict, current: dict, checkpoint: Path) -> None:
    """ConfigError naming the first setting a resume would silently change: the vocabulary,
    the data files, the feature lengths or the batch size the checkpoint was trained with. (Checkpoints written
    before these were recorded are resumed unchecked.)"""
    fix = (
        "; keep the original setting, or start a new MODEL_DIR from this checkpoint with "
        f"--gin.INITIAL_CHECKPOINT_PATH={checkpoint}"
    )
    old_vocab, new_vocab = recorded.get("vocabulary", {}), current.get("vocabulary", {})
    if (
        old_vocab.get("sha256")
        and new_vocab.get("sha256")
        and (old_vocab["sha256"] != new_vocab["sha256"])
    ):
        raise ConfigError(
            f"{checkpoint} was trained with the vocabulary {old_vocab.get('source')} (sha256 "
            f"{old_vocab['sha256'][:12]}) but this run's is {new_vocab.get('source')} (sha256 "
            f"{new_vocab['sha256'][:12]}): the token ids would change meaning{fix}"
        )
    if "data_files" in recorded and recorded["data_files"] != current.get("data_files"):
        changed = output_identity.first_difference(
            {"data": recorded["data_files"]}, {"data": current.get("data_files")}
        )
        raise ConfigError(
            f"{checkpoint} was trained on other data ({changed}); the recorded data position "
            "would read other batches; restore those files, or start a new MODEL_DIR from this "
            f"checkpoint with --gin.INITIAL_CHECKPOINT_PATH={checkpoint}"
        )
    for key, name in (
        ("task_feature_lengths", "TASK_FEATURE_LENGTHS"),
        ("batch_size", "BATCH_SIZE"),
    ):
        if key in recorded and recorded[key] != current.get(key):
            raise ConfigError(
                f"{checkpoint} was trained with {name}={recorded[key]} but this run "
                f"has {name}={current.get(key)}; resuming would change the data "
                f"position's meaning{fix}"
            )


def default_max_decode_length(model, task_feature_lengths) -> int:
    """How long decoding may run when no length is set: the targets' length for an
    encoder-decoder; inputs + targets for a decoder-only model, whose decoder holds the prompt
    too (targets alone would be shorter than its own inputs)."""
    lengths = dict(task_feature_lengths or {})
    targets = lengths.get("targets", 256)
    if model.config.is_decoder_only:
        return lengths.get("inputs", 0) + targets
    return targets


def make_optimizer(optimizer, learning_rate_fn, param_axes):
    """An optax transformation from a name ('adafactor') or a factory taking the schedule
    (and `param_logical_axes` where it accepts them): train and precompile build the same."""
    if isinstance(optimizer, str):
        return optimizers.create_optimizer(optimizer, learning_rate_fn, param_axes)
    accepts_axes = "param_logical_axes" in inspect.signature(optimizer).parameters
    if accepts_axes:
        return optimizer(learning_rate_fn, param_logical_axes=param_axes)
    return optimizer(learning_rate_fn)


def training_batches(model, cfg: DatasetConfig, random_seed: int, shuffle: bool):
    """This process's share of `cfg`'s batches, repeated forever (train and precompile read
    the same batches)."""
    from t5forge.data.batch_iterator import make_batch_iterator

    return make_batch_iterator(
        cfg.mixture_or_task_name,
        cfg.split,
        dict(cfg.task_feature_lengths),
        cfg.batch_size // jax.process_count(),
        converter_for(model, cfg.pack),
        seed=random_seed if cfg.seed is None else cfg.seed,
        shard_index=jax.process_index(),
        num_shards=jax.process_count(),
        shuffle=shuffle and cfg.shuffle,
        num_epochs=None,
        use_cached=cfg.use_cached,
    )
