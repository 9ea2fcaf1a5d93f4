"""Pieces every run command (train, eval, infer) assembles the same way from gin.

Kept in one place so the three commands build the model, the mesh and the parameters from a
checkpoint identically: a checkpoint evaluated by `eval` is exactly the one `train` wrote.
"""

from __future__ import annotations

import logging
from pathlib import Path

import gin
import jax
import numpy as np

from t5forge.cli import gin_flags
from t5forge.cli.run_config import PjitPartitioner, RestoreCheckpointConfig
from t5forge.cli.task_modules import import_task_modules
from t5forge.errors import CheckpointError, ConfigError
from t5forge.models.configs import T5Config, config_from_gin
from t5forge.models.model import DecoderOnlyModel, EncoderDecoderModel, build_model
from t5forge.training import checkpoints, partitioning

logger = logging.getLogger("t5forge")

# T5X's gin names for the model classes: `MODEL = @models.EncoderDecoderModel()`.
gin.external_configurable(EncoderDecoderModel, module="models")
gin.external_configurable(DecoderOnlyModel, module="models")


@gin.configurable(module="models")
def Model(  # noqa: N802 - a gin name, like T5X's model classes
    config: T5Config | None = None,
    z_loss: float = 1e-4,
    label_smoothing: float = 0.0,
    loss_normalizing_factor=None,
):
    """The model the gin files describe, encoder-decoder or decoder-only by its config.

    `config` defaults to the T5Config bound by the model gin file (`T5Config.emb_dim = ...`).
    """
    return build_model(config or config_from_gin(), z_loss=z_loss, label_smoothing=label_smoothing,
                       loss_normalizing_factor=loss_normalizing_factor)


def make_mesh(partitioner: PjitPartitioner):
    mesh = partitioning.create_mesh(partitioner.num_partitions, partitioner.mesh_shape)
    rules = partitioning.standard_logical_axis_rules(
        fsdp=partitioner.fsdp, overrides=tuple(tuple(r) for r in partitioner.logical_axis_rules)
    )
    return mesh, rules


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


def parse_common_flags(rest: list[str], help_text: str, command: str) -> bool:
    """Handles the non-gin flags all run commands share; False means `--help` was printed.

    --module_import=MOD (repeatable) imports user task modules; --coordinator_address,
    --process_count and --process_index join a multi-host run, as in T5X.
    """
    import argparse

    parser = argparse.ArgumentParser(
        prog=f"t5forge {command}", description=help_text,
        epilog="gin: --gin_file=FILE (repeatable), --gin.NAME=VALUE, --gin_search_paths=DIR,...",
    )
    parser.add_argument("--module_import", action="append", default=[])
    parser.add_argument("--seqio_additional_cache_dirs", default="",
                        help="comma-separated dirs written by `t5forge cache-tasks` (T5X's flag)")
    parser.add_argument("--coordinator_address")
    parser.add_argument("--process_count", type=int)
    parser.add_argument("--process_index", type=int)
    if any(arg in ("-h", "--help") for arg in rest):
        parser.print_help()
        return False
    args, unknown = parser.parse_known_args(rest)
    if unknown:
        raise ConfigError(f"unknown flag {unknown[0]!r}; see --help")
    if args.coordinator_address or args.process_count is not None:
        partitioning.initialize_distributed(args.coordinator_address, args.process_count, args.process_index)
    import_task_modules(args.module_import)
    from t5forge.data.tasks import add_global_cache_dirs

    add_global_cache_dirs([d for d in args.seqio_additional_cache_dirs.split(",") if d])
    return True


def configure_run(argv: list[str], help_text: str, command: str) -> bool:
    """Parses `t5forge <command>`'s flags and gin files; False means `--help` was printed instead."""
    flags = gin_flags.split_gin_flags(argv)
    if not parse_common_flags(flags.rest, help_text, command):
        return False
    gin_flags.parse_gin(flags)
    return True
