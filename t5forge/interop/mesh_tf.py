"""Imports Mesh TensorFlow checkpoints (the original T5 / mT5 releases) into t5forge params.

The published T5 1.0 / 1.1 / mT5 weights exist only as TensorFlow checkpoints with Mesh TF
variable names (`encoder/block_000/layer_000/SelfAttention/q`). The renaming to T5X's tree is
pure and lives in `mesh_tf_variables_to_params` (testable without TensorFlow); only reading the
checkpoint file needs TensorFlow, the optional `tensorflow` extra, imported when called.
Mesh TF stores kernels in the same [in, out] orientation as T5X, so nothing is transposed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from t5forge.errors import CheckpointError

_STACKS = {"encoder": "encoder", "decoder": "decoder", "transformer": "decoder"}
_BLOCK = r"(encoder|decoder|transformer)/block_(\d+)/layer_(\d+)/"
_ATTENTION = re.compile(_BLOCK + r"(SelfAttention|EncDecAttention)/([qkvo])$")
_RELPOS = re.compile(_BLOCK + r"SelfAttention/relative_attention_bias$")
_MLP = re.compile(_BLOCK + r"DenseReluDense/(wi|wi_0|wi_1|wo)/kernel$")
_NORM = re.compile(_BLOCK + r"(?:layer|rms)_norm/scale$")
_FINAL_NORM = re.compile(r"(encoder|decoder|transformer)/(?:final_layer|rms)_norm/scale$")
_OPTIMIZER_SLOT = re.compile(r"_slot_\w+$")  # Adafactor's _slot_vc / _slot_vr / _slot_v
_MATRICES = {"q": "query", "k": "key", "v": "value", "o": "out"}
# the pre-norm of a sub-layer is named after the module that follows it
_NORM_BEFORE = {
    ("encoder", "SelfAttention"): "pre_attention_layer_norm",
    ("decoder", "SelfAttention"): "pre_self_attention_layer_norm",
    ("decoder", "EncDecAttention"): "pre_cross_attention_layer_norm",
    ("encoder", "DenseReluDense"): "pre_mlp_layer_norm",
    ("decoder", "DenseReluDense"): "pre_mlp_layer_norm",
}


def mesh_tf_variables_to_params(variables: Mapping[str, np.ndarray]) -> tuple[dict, int]:
    """(params, step) from Mesh TF variable names -> arrays; optimizer slots are dropped.

    Unknown names raise CheckpointError (silently dropping a weight would give a broken
    model that still loads).
    """
    modules = _sub_layer_modules(variables)
    params: dict = {}
    step = 0
    unknown = []
    for name, value in variables.items():
        if _OPTIMIZER_SLOT.search(name):
            continue
        if name == "global_step":
            step = int(np.asarray(value))
            continue
        target = _param_path(name, modules)
        if target is None:
            unknown.append(name)
            continue
        _insert(params, target, np.asarray(value, dtype=np.float32))
    if unknown:
        shown = ", ".join(sorted(unknown)[:3])
        raise CheckpointError(
            f"{len(unknown)} Mesh TF variables have no t5forge name (e.g. {shown}); "
            "only T5 / mT5 encoder-decoder and decoder-only checkpoints are supported"
        )
    if "token_embedder" not in params:
        raise CheckpointError("the checkpoint has no shared/embedding; is it a Mesh TF T5 model?")
    return params, step


def _param_path(name: str, modules: Mapping[tuple, str]) -> tuple[str, ...] | None:
    if name == "shared/embedding":
        return ("token_embedder", "embedding")
    if name in ("decoder/logits/kernel", "transformer/logits/kernel"):
        return ("decoder", "logits_dense", "kernel")
    if m := _FINAL_NORM.match(name):
        stack = _STACKS[m.group(1)]
        return (stack, f"{stack}_norm", "scale")
    if m := _RELPOS.match(name):
        if int(m.group(2)) != 0:
            raise CheckpointError(
                f"{name}: a relative attention bias per layer is not supported (T5 and mT5 "
                "share one per stack, in block_000)"
            )
        return (_STACKS[m.group(1)], "relpos_bias", "rel_embedding")
    if m := _ATTENTION.match(name):
        stack, layer = _STACKS[m.group(1)], f"layers_{int(m.group(2))}"
        if stack == "encoder":
            module = "attention"
        else:
            module = (
                "self_attention" if m.group(4) == "SelfAttention" else ("encoder_decoder_attention")
            )
        return (stack, layer, module, _MATRICES[m.group(5)], "kernel")
    if m := _MLP.match(name):
        return (_STACKS[m.group(1)], f"layers_{int(m.group(2))}", "mlp", m.group(4), "kernel")
    if m := _NORM.match(name):
        stack = _STACKS[m.group(1)]
        module = modules.get((m.group(1), m.group(2), m.group(3)))
        norm = _NORM_BEFORE.get((stack, module))
        return None if norm is None else (stack, f"layers_{int(m.group(2))}", norm, "scale")
    return None


def _sub_layer_modules(variables: Mapping[str, np.ndarray]) -> dict[tuple, str]:
    """(stack, block, layer) -> the module in that sub-layer, to name its layer norm."""
    modules = {}
    pattern = re.compile(_BLOCK + r"(SelfAttention|EncDecAttention|DenseReluDense)/")
    for name in variables:
        if m := pattern.match(name):
            modules[m.group(1), m.group(2), m.group(3)] = m.group(4)
    return modules


def _insert(tree: dict, path: tuple[str, ...], value: np.ndarray) -> None:
    for key in path[:-1]:
        tree = tree.setdefault(key, {})
    tree[path[-1]] = value


def checkpoint_prefix(path: str | Path) -> str | None:
    """The TF checkpoint prefix (`.../model.ckpt-1000000`) that `path` names, or None.

    Accepts the prefix itself, its `.index` file, or a directory holding a TF `checkpoint`
    state file (the latest checkpoint) or `*.index` files (the highest step).
    """
    path = Path(path)
    if path.suffix == ".index" and path.is_file():
        return str(path.with_suffix(""))
    if Path(f"{path}.index").is_file():
        return str(path)
    if not path.is_dir():
        return None
    state = path / "checkpoint"
    if state.is_file():
        try:
            text = state.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            text = ""  # a binary `checkpoint` file is T5X's msgpack, not TensorFlow's
        if m := re.search(r'^model_checkpoint_path:\s*"(.+)"', text, re.MULTILINE):
            latest = Path(m.group(1))
            return str(latest if latest.is_absolute() else path / latest)
    indexes = sorted(path.glob("*.index"), key=lambda p: _step_of(p.stem))
    return str(indexes[-1].with_suffix("")) if indexes else None


def _step_of(prefix: str) -> int:
    m = re.search(r"-(\d+)$", prefix)
    return int(m.group(1)) if m else -1


def is_mesh_tf_checkpoint(path: str | Path) -> bool:
    """True when `path` names a TensorFlow checkpoint (no TensorFlow needed to tell)."""
    return checkpoint_prefix(path) is not None


def read_tf_variables(prefix: str) -> dict[str, np.ndarray]:
    """Every variable of a TF checkpoint as numpy (needs the optional TensorFlow)."""
    try:
        import tensorflow as tf
    except ImportError:
        raise CheckpointError(
            f"reading the Mesh TensorFlow checkpoint {prefix} needs TensorFlow; install it "
            "with `pip install 't5forge[tensorflow]'`"
        ) from None
    try:
        reader = tf.train.load_checkpoint(prefix)
        return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}
    except (tf.errors.OpError, ValueError) as e:
        reason = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
        raise CheckpointError(f"{prefix} is truncated or corrupt ({reason})") from None


def load_mesh_tf_checkpoint(path: str | Path) -> tuple[dict, int]:
    """(params, step) of a Mesh TF checkpoint, in t5forge's per-layer T5X naming."""
    prefix = checkpoint_prefix(path)
    if prefix is None:
        raise CheckpointError(
            f"{path} is not a TensorFlow checkpoint (looked for PREFIX.index, a `checkpoint` "
            "state file or *.index files)"
        )
    return mesh_tf_variables_to_params(read_tf_variables(prefix))
