"""Moves a model between checkpoint formats: `t5forge.convert` and `t5forge convert`.

    t5forge.convert("ckpt", "hf_dir", from_="t5x", to="hf", config="t5_1_1/base")
    t5forge.convert("run/checkpoint_5000", "t5x_dir", from_="t5forge", to="t5x")

Reading goes through `t5forge.checkpoints.reader`, as `t5forge.load` does (T5X / Mesh TF
checkpoints given no config get the one their parameters imply), so a conversion sees a
checkpoint exactly as the Python API does, its parameters checked against the model their
config builds before anything is written.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import jax
import numpy as np

from t5forge import storage
from t5forge.checkpoints import formats, reader
from t5forge.errors import ConfigError
from t5forge.interop import hub
from t5forge.run.storage_errors import StorageFailureEcho

SOURCES = (formats.HF, formats.T5X, formats.MESH_TF, formats.T5FORGE)
TARGETS = (formats.T5FORGE, formats.HF, formats.T5X)


@dataclasses.dataclass(frozen=True)
class Converted:
    """What a conversion wrote: every tensor with its shape (so a caller can see nothing was
    dropped) and the checkpoint's path (for T5X the `checkpoint_<step>` directory inside the
    output, which T5X's INITIAL_CHECKPOINT_PATH takes)."""

    tensors: dict[str, tuple[int, ...]]
    path: Path


def convert(
    path, output, *, from_: str, to: str, config=None, vocab=None, extra_ids: int = 100
) -> Converted:
    """Converts the `from_` checkpoint at `path` into a `to` checkpoint in directory `output`.

    `path` may be a hub id (`org/name` with from_='hf', or `hf://org/name`; see
    t5forge.interop.hub). `config` (preset name, model gin file or T5Config) is as
    `t5forge.load` takes it; T5X and Mesh TF checkpoints without one get the config their
    parameters imply. `vocab` (a SentencePiece model with `extra_ids`) ships with the
    output, else the source's own one; a T5X checkpoint carries none (T5X's gin names its
    vocabulary) and keeps the source's training step, as T5X fine-tuning counts TRAIN_STEPS
    on from it.
    """
    from tqdm import tqdm

    from t5forge.models.param_names import named_leaves

    _check_formats(from_, to, vocab)
    with tqdm(total=2, desc="convert", unit="stage", disable=None) as bar:
        bar.set_postfix_str(f"reading {from_}")
        checkpoint = _read(Path(hub.local_path(path, bare_ids=from_ == formats.HF)), from_, config)
        config, params, source_vocab = checkpoint.config, checkpoint.params, checkpoint.vocabulary
        if vocab is None and source_vocab is not None and to != formats.T5X:
            vocab, extra_ids = source_vocab.path, source_vocab.extra_ids
        bar.update()
        bar.set_postfix_str(f"writing {to}")
        output = Path(output)
        storage.make_directory(output, "--output")
        # A full disk is one line, not orbax's writer threads' tracebacks around it.
        echo = StorageFailureEcho()
        echo.install()
        written = output
        try:
            if to == formats.HF:
                from t5forge.interop.huggingface import save_hf_dir

                save_hf_dir(
                    params, config, output, vocab_path=vocab, extra_ids=extra_ids if vocab else 0
                )
            elif to == formats.T5X:
                from t5forge.interop.t5x_writer import save_t5x_checkpoint

                switches = config.family_switches()
                if switches:
                    raise ConfigError(
                        f"T5X's network has no {switches[0]} (a T5Gemma switch this model "
                        "sets); convert it --to t5forge or --to hf instead"
                    )

                written = save_t5x_checkpoint(params, output, checkpoint.step)
            else:
                _write_t5forge(config, params, output, vocab, extra_ids)
        finally:
            echo.remove()
        bar.update()
    tensors = {name: tuple(np.shape(leaf)) for name, leaf in named_leaves(params).items()}
    return Converted(tensors, written)


def _check_formats(from_: str, to: str, vocab) -> None:
    if from_ not in SOURCES:
        raise ConfigError(f"cannot convert from {from_!r}; use one of {', '.join(SOURCES)}")
    if to not in TARGETS:
        raise ConfigError(f"cannot convert to {to!r}; use one of {', '.join(TARGETS)}")
    if to == formats.T5X and vocab is not None:
        raise ConfigError(
            "a T5X checkpoint carries no vocabulary (T5X's gin names it, e.g. "
            "seqio.SentencePieceVocabulary.sentencepiece_model_file); drop --vocab"
        )


def _read(path: Path, fmt: str, config) -> reader.Checkpoint:
    """The `fmt` checkpoint at `path`; T5X and Mesh TF checkpoints without a config get the
    one their parameters imply."""
    if not path.exists():
        raise ConfigError(f"--input {path} does not exist")
    detected = formats.detect_format(path)
    if detected not in (None, fmt):
        raise ConfigError(
            f"--input {path} is a {detected} checkpoint, not {fmt}; pass --from {detected}"
        )
    return reader.read(path, config, infer_config=True)


def _write_t5forge(config, params, output: Path, vocab, extra_ids: int) -> None:
    """A t5forge checkpoint at step 0 recording its config (and vocabulary), as `load` reads."""
    from t5forge.checkpoints.checkpointer import Checkpointer

    metadata = {"model_config": dataclasses.asdict(config), "converted": True}
    if vocab:
        with storage.replaced_atomically(output / "spiece.model") as temporary:
            shutil.copyfile(vocab, temporary)
        metadata["vocabulary"] = {"path": "spiece.model", "extra_ids": extra_ids}
    checkpointer = Checkpointer(output, async_save=False)
    checkpointer.save(
        0, {"params": jax.tree.map(np.asarray, params)}, metadata=metadata, force=True
    )
    checkpointer.close()
