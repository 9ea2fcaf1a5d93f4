"""Which kind of checkpoint a path holds, and the parameters of the kinds t5forge did not write.

`t5forge.load`, a run's INITIAL_CHECKPOINT_PATH / CHECKPOINT_PATH and `t5forge convert` all ask
this one list, so a checkpoint is recognised (or refused, naming every format tried) the same
way everywhere. Each test is cheap (no arrays are read). Order matters: Hugging Face and t5forge
directories are unambiguous; T5X comes after them since it accepts any Orbax tree whose keys are
T5X's; Mesh TensorFlow (PREFIX.index files) comes last.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from t5forge.errors import CheckpointError
from t5forge.interop import huggingface, mesh_tf, t5x
from t5forge.models.configs import T5Config
from t5forge.models.param_layout import stack_layers

HF, T5FORGE, T5X, MESH_TF = "hf", "t5forge", "t5x", "mesh_tf"
FOREIGN = (HF, T5X, MESH_TF)  # what `read_params` reads; t5forge's own go through checkpoints


@dataclass(frozen=True)
class CheckpointFormat:
    """A format's name (as `t5forge convert --from` takes it), what it looks like, its test."""

    name: str
    description: str
    matches: Callable[[Path], bool]


def _is_t5forge_checkpoint(path: Path) -> bool:
    from t5forge.checkpoints.step_dir import resolve_step_dir

    try:
        resolve_step_dir(path)
    except CheckpointError:
        return False
    return True


FORMATS = (
    CheckpointFormat(
        HF,
        "Hugging Face (config.json + model.safetensors or pytorch_model.bin)",
        huggingface.is_hf_dir,
    ),
    CheckpointFormat(T5FORGE, "t5forge (checkpoint_<step>/state)", _is_t5forge_checkpoint),
    CheckpointFormat(T5X, "T5X (msgpack, tensorstore or Orbax checkpoint)", t5x.is_t5x_checkpoint),
    CheckpointFormat(
        MESH_TF,
        "Mesh TensorFlow (PREFIX.index or a TF `checkpoint` file)",
        mesh_tf.is_mesh_tf_checkpoint,
    ),
)


def detect_format(path: str | Path) -> str | None:
    """The name of the first format `path` looks like (HF, T5FORGE, T5X, MESH_TF), else None."""
    path = Path(path)
    return next((fmt.name for fmt in FORMATS if fmt.matches(path)), None)


def unrecognised(path: str | Path) -> CheckpointError:
    """The error for a path that is none of the formats, naming each one tried."""
    tried = "; ".join(fmt.description for fmt in FORMATS)
    return CheckpointError(f"{path} is not a checkpoint t5forge recognises; tried {tried}")


def read_params(path: str | Path, fmt: str, config: T5Config | None = None) -> tuple[dict, int]:
    """(params, step) of a Hugging Face, T5X or Mesh TF checkpoint: params float32 numpy with
    T5X names, step the training step it records (0 for Hugging Face, which records none).

    With `config` they come in the layer layout it runs with (stacked when scan_layers) and a
    Hugging Face directory is read as that config; without, per layer as stored.
    """
    if fmt not in FOREIGN:
        raise ValueError(f"read_params reads {FOREIGN} checkpoints, not {fmt!r}")
    if fmt == HF:
        return huggingface.load_hf_dir(path, config)[1], 0
    reader = t5x.load_t5x_checkpoint if fmt == T5X else mesh_tf.load_mesh_tf_checkpoint
    params, step = reader(path)[:2]
    return (params if config is None else stack_layers(params, config)), int(step)
