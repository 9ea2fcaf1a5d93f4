"""The one way t5forge opens a checkpoint: `read(path)` -> config, params, vocabulary, lengths.

`t5forge.load` (and so `t5forge serve`), a run's INITIAL_CHECKPOINT_PATH / CHECKPOINT_PATH
(train, eval, infer) and `t5forge convert` all read through it, so a checkpoint means the same
thing everywhere: the format is told by `formats.detect_format`, a bucket's checkpoint is read
from its verified local mirror, the config is the one given or the one the checkpoint records,
the vocabulary is the SentencePiece model beside it, and the lengths are those it was trained
with.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import re
from pathlib import Path

import jax
import numpy as np

from t5forge.checkpoints import formats, remote_model_dir
from t5forge.data.vocabularies import SentencePieceVocabulary
from t5forge.errors import CheckpointError, ConfigError
from t5forge.interop import hf_t5gemma, hub, huggingface
from t5forge.models.configs import T5Config
from t5forge.models.model import build_model
from t5forge.models.presets import PRESETS, get_config

SPIECE = "spiece.model"
# transformers' T5Tokenizer appends 100 sentinels to spiece.model unless told otherwise.
_HF_DEFAULT_EXTRA_IDS = 100
_FEATURE_LENGTHS_LINE = re.compile(r"^TASK_FEATURE_LENGTHS\s*=\s*(\{.*\})\s*$", re.MULTILINE)


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """What a checkpoint holds, as t5forge runs it.

    `feature_lengths` are the lengths it was trained with (a t5forge run's task feature
    lengths; a Hugging Face config's `n_positions` as 'inputs'), {} when it records none.
    `report` says what was restored, for a run's log. `step` is the training step it records
    (0 for Hugging Face directories), which a conversion to T5X keeps: T5X fine-tuning
    configs count their TRAIN_STEPS on from the pretrained step.
    """

    path: Path
    format: str
    config: T5Config
    params: dict
    vocabulary: SentencePieceVocabulary | None
    feature_lengths: dict[str, int]
    report: str
    step: int = 0


def resolve_config(config) -> T5Config | None:
    """None, a T5Config, a preset name ('t5_1_1/small') or a gin file binding T5Config.*."""
    if config is None or isinstance(config, T5Config):
        return config
    if str(config) in PRESETS:
        return get_config(str(config))
    if Path(config).is_file():
        from t5forge.interop.gin_model_config import config_from_gin_file

        return config_from_gin_file(config)
    return get_config(str(config))  # raises ConfigError naming the closest presets


def read(
    path, config=None, *, target_params=None, assignment_map=(), infer_config: bool = False
) -> Checkpoint:
    """Reads the Hugging Face directory, t5forge, T5X or Mesh TF checkpoint at `path`
    (or the Hugging Face model a hub id `hf://org/name[@revision]` names; interop/hub.py).

    `config` (as `resolve_config` takes it) overrides the recorded one and is needed for T5X
    and Mesh TF checkpoints, which record none, unless `infer_config` lets their parameters
    imply it. A t5forge checkpoint is restored into `target_params` (initialised, maybe
    sharded, arrays or their shapes; default the config's shapes) through `assignment_map`
    (see step_dir.restore_params); the other formats are read whole and must fit.
    """
    local = Path(remote_model_dir.local_copy(hub.local_path(path)))
    if not local.exists():
        raise CheckpointError(
            f"{local} does not exist; pass a Hugging Face model directory (or hub id "
            f"hf://org/name), a t5forge checkpoint or a T5X checkpoint"
        )
    fmt = formats.detect_format(local)
    if fmt is None:
        raise formats.unrecognised(local)
    config = resolve_config(config)
    if fmt == formats.T5FORGE:
        return _read_t5forge(local, config, target_params, assignment_map)
    vocabulary, lengths, step = None, {}, 0
    if fmt == formats.HF:
        config, params = huggingface.load_hf_dir(local, config)
        vocabulary, lengths = _hf_vocabulary(local, config), _hf_lengths(local)
    elif config is None and not infer_config:
        name = {formats.T5X: "T5X", formats.MESH_TF: "Mesh TF"}[fmt]
        raise ConfigError(
            f"{name} checkpoint {local} does not record its model config; pass "
            f"config= a preset name (e.g. 't5_1_1/base') or a model gin file"
        )
    else:
        params, step = formats.read_params(local, fmt, config)
        if config is None:
            from t5forge.interop.t5x import infer_config as implied_config

            config = implied_config(params)
    build_model(config).check_params_match(params)
    params = jax.tree.map(np.asarray, params)
    report = f"loaded every parameter from {path}"
    return Checkpoint(local, fmt, config, params, vocabulary, lengths, report, step)


def _read_t5forge(step_or_model_dir: Path, config, target_params, assignment_map) -> Checkpoint:
    from t5forge.checkpoints.step_dir import read_metadata, resolve_step_dir, restore_params

    step_dir = resolve_step_dir(step_or_model_dir)
    metadata = read_metadata(step_dir)
    if config is None:
        if "model_config" in metadata:
            config = T5Config(**metadata["model_config"])
        elif (step_dir.parent / "config.gin").is_file():
            config = resolve_config(step_dir.parent / "config.gin")
        else:
            raise ConfigError(
                f"{step_dir} records no model config; pass config= a preset "
                f"name or a model gin file"
            )
    if target_params is None:
        target_params = build_model(config).abstract_params()
    params, report = restore_params(step_dir, target_params, assignment_map)
    vocab_file = step_dir.parent / SPIECE
    extra_ids = metadata.get("vocabulary", {}).get("extra_ids", 0)
    vocabulary = (
        SentencePieceVocabulary(vocab_file, extra_ids=extra_ids) if vocab_file.is_file() else None
    )
    return Checkpoint(
        step_dir,
        formats.T5FORGE,
        config,
        params,
        vocabulary,
        _recorded_feature_lengths(step_dir, metadata),
        report.summary(),
        int(metadata.get("step", 0)),
    )


def _recorded_feature_lengths(step_dir: Path, metadata: dict) -> dict[str, int]:
    """The feature lengths a t5forge run trained with: the checkpoint metadata's
    `task_feature_lengths`, else TASK_FEATURE_LENGTHS in the run's config.gin, else {}."""
    lengths = metadata.get("task_feature_lengths")
    gin_file = step_dir.parent / "config.gin"
    if lengths is None and gin_file.is_file():
        match = _FEATURE_LENGTHS_LINE.search(gin_file.read_text())
        try:
            lengths = ast.literal_eval(match.group(1)) if match else None
        except (ValueError, SyntaxError):
            lengths = None
    if not isinstance(lengths, dict):
        return {}
    return {k: int(v) for k, v in lengths.items() if isinstance(v, int) and v > 0}


def _hf_lengths(path: Path) -> dict[str, int]:
    """A Hugging Face config's `n_positions` (the longest input it was made for) as 'inputs'."""
    config_file = path / "config.json"
    hf_config = json.loads(config_file.read_text()) if config_file.is_file() else {}
    n_positions = hf_config.get("n_positions")
    return {"inputs": int(n_positions)} if n_positions else {}


def _hf_vocabulary(path: Path, config: T5Config):
    spiece = path / SPIECE
    if not spiece.is_file():
        gemma = path / hf_t5gemma.TOKENIZER_FILE
        # Gemma's SentencePiece model holds every id itself: no T5 sentinels on top.
        return SentencePieceVocabulary(gemma, extra_ids=0) if gemma.is_file() else None
    tokenizer_config = path / "tokenizer_config.json"
    extra_ids = None
    if tokenizer_config.is_file():
        extra_ids = json.loads(tokenizer_config.read_text()).get("extra_ids")
    if extra_ids is None:
        pieces = SentencePieceVocabulary(spiece).vocab_size
        fits = pieces + _HF_DEFAULT_EXTRA_IDS <= config.vocab_size
        extra_ids = _HF_DEFAULT_EXTRA_IDS if fits else 0
    return SentencePieceVocabulary(spiece, extra_ids=extra_ids)
