"""Reads T5X checkpoints of every kind found on disk into t5forge's plain params dict.

Users arrive with years of T5X checkpoints written by different T5X and Orbax versions:
single-file flax msgpack, the native `checkpoint_<step>/checkpoint` msgpack whose large
arrays are TensorStore zarr directories, the Orbax-era msgpack with `PLACEHOLDER://`
leaves, and plain Orbax PyTree directories with `_METADATA`. All of them hold the same
T5X state dict, `{'target': params, 'state': {'step', 'param_states'}}`, so this module
only has to find that dict, materialise its leaves (without TensorFlow) and, for
`scan_layers` models, split the stacked layers into `layers_N`.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgpack
import numpy as np

from t5forge.errors import CheckpointError

FORMAT_MSGPACK = "t5x_msgpack"  # one flax msgpack file holding every array
FORMAT_TENSORSTORE = "t5x_tensorstore"  # checkpoint_<step>/checkpoint + zarr dirs named by specs
FORMAT_ORBAX_MSGPACK = "t5x_orbax_msgpack"  # checkpoint msgpack with PLACEHOLDER:// leaves
FORMAT_ORBAX = "orbax"  # Orbax PyTree directory with a _METADATA file

_FORMATS_TRIED = (
    f"{FORMAT_MSGPACK} (a single msgpack file), "
    f"{FORMAT_TENSORSTORE} (a directory with a `checkpoint` msgpack file), "
    f"{FORMAT_ORBAX_MSGPACK} (`checkpoint` with PLACEHOLDER:// leaves), "
    f"{FORMAT_ORBAX} (a directory with `_METADATA`), "
    "or a model directory holding checkpoint_<step>/ subdirectories"
)
_PLACEHOLDER = "PLACEHOLDER://"
_STATE_KEYS = ("optimizer", "_optimizer")  # where T5X versions nest {'target', 'state'}
_STEP_DIR = re.compile(r"checkpoint_(\d+)$")


def load_t5x_checkpoint(
    path: str | Path,
    with_optimizer_state: bool = False,
    array_hints: Mapping[str, Any] | None = None,
) -> tuple[dict, int, dict | None]:
    """Returns (params, step, opt_state) from any T5X checkpoint kind.

    `params` is the plain nested dict with T5X names (float32 numpy, layers unstacked to
    `layers_N`). `opt_state` is `{'step': int, 'param_states': {... per param:
    {'v_row', 'v_col', 'v', 'm'}}}` (T5X Adafactor slots, unused ones shape (1,)) when
    `with_optimizer_state`, else None. `array_hints` maps dotted checkpoint names
    (e.g. 'target.encoder.layers_0.mlp.wo.kernel') to objects with `.shape`/`.dtype`; it is
    only needed for zarr directories whose `.zarray` header was lost in a copy.
    """
    state = read_t5x_state(path, with_optimizer_state, array_hints)
    params = _as_float32_tree(state.get("target") or {})
    step = int(np.asarray(state.get("state", {}).get("step", 0)))
    opt_state = None
    if with_optimizer_state:
        slots = _as_float32_tree(state.get("state", {}).get("param_states") or {})
        opt_state = {"step": step, "param_states": slots}
    if _is_scanned(params):
        params, opt_state = _unstack_scanned(params, opt_state)
    return params, step, opt_state


def is_t5x_checkpoint(path: str | Path) -> bool:
    """True when `path` looks like a T5X checkpoint (cheap: decodes no arrays).

    A truncated T5X file still counts, so that loading it reports the corruption.
    """
    try:
        _resolve(Path(path))
    except CheckpointError:
        return False
    return True


def detect_format(path: str | Path) -> str:
    """Names the on-disk kind of a T5X checkpoint (one of the FORMAT_* constants)."""
    return _resolve(Path(path))[1]


def read_t5x_state(
    path: str | Path,
    with_optimizer_state: bool = True,
    array_hints: Mapping[str, Any] | None = None,
) -> dict:
    """Returns the raw T5X state dict `{'target': ..., 'state': {...}}` with numpy leaves.

    Arrays keep their stored dtype here; `load_t5x_checkpoint` converts and unstacks.
    """
    location, fmt = _resolve(Path(path))
    if fmt == FORMAT_ORBAX:
        return _read_orbax(location, with_optimizer_state)
    raw = _unpack_msgpack(location)
    state = _find_state(raw, location)
    if not with_optimizer_state and isinstance(state.get("state"), dict):
        state = {**state, "state": {"step": state["state"].get("step", 0)}}
    version = int(raw.get("version", 3)) if isinstance(raw, dict) else 3
    reader = _LeafReader(location.parent, version, array_hints or {})
    return reader.materialize(state, ())


# ---------------------------------------------------------------- locating the checkpoint


def _resolve(path: Path) -> tuple[Path, str]:
    """Finds the file/dir that holds the state and its format, or says what was tried."""
    if not path.exists():
        raise CheckpointError(f"T5X checkpoint {path} does not exist; check the path")
    if path.is_file():
        return path, _msgpack_format(path)
    if (path / "_METADATA").is_file() and _orbax_holds_t5x_state(path):
        return path, FORMAT_ORBAX
    if (path / "state" / "_METADATA").is_file() and _orbax_holds_t5x_state(path / "state"):
        return path / "state", FORMAT_ORBAX
    if (path / "checkpoint").is_file():
        return path / "checkpoint", _msgpack_format(path / "checkpoint")
    steps = sorted(
        (int(m.group(1)), child)
        for child in path.iterdir()
        if child.is_dir() and (m := _STEP_DIR.match(child.name))
    )
    for _, child in reversed(steps):
        try:
            return _resolve(child)
        except CheckpointError:
            continue
    raise CheckpointError(f"{path} is not a T5X checkpoint; tried {_FORMATS_TRIED}")


def _msgpack_format(file: Path) -> str:
    """Tells the msgpack kinds apart by their top-level keys, without decoding any array."""
    keys = _top_level_keys(file)
    if "_optimizer" in keys:
        return FORMAT_ORBAX_MSGPACK
    if keys & {"optimizer", "target"}:
        return FORMAT_TENSORSTORE if file.name == "checkpoint" else FORMAT_MSGPACK
    raise CheckpointError(f"{file} is msgpack without T5X state keys; tried {_FORMATS_TRIED}")


def _top_level_keys(file: Path) -> set[str]:
    """Keys of the top-level msgpack map, up to the first T5X state key (values skipped)."""
    with file.open("rb") as f:
        if not _starts_with_msgpack_map(f.read(1)):
            raise CheckpointError(f"{file} is not a T5X checkpoint; tried {_FORMATS_TRIED}")
        f.seek(0)
        unpacker = msgpack.Unpacker(f, raw=False, max_buffer_size=0)
        keys: set[str] = set()
        try:
            for _ in range(unpacker.read_map_header()):
                keys.add(unpacker.unpack())
                if keys & {"target", *_STATE_KEYS}:
                    break
                unpacker.skip()
        except (ValueError, msgpack.OutOfData, msgpack.UnpackException) as e:
            raise _corrupt(file, e) from e
    return keys


def _starts_with_msgpack_map(first_byte: bytes) -> bool:
    return bool(first_byte) and (0x80 <= first_byte[0] <= 0x8F or first_byte[0] in (0xDE, 0xDF))


def _corrupt(file: Path, error: Exception) -> CheckpointError:
    return CheckpointError(
        f"{file} is truncated or corrupt (msgpack: {str(error) or type(error).__name__}); "
        "copy the checkpoint again"
    )


def _orbax_holds_t5x_state(directory: Path) -> bool:
    """True when an Orbax PyTree's top-level keys are T5X's (not some other framework's)."""
    try:
        tree = json.loads((directory / "_METADATA").read_text())["tree_metadata"]
    except (OSError, ValueError, KeyError) as e:
        raise CheckpointError(f"{directory / '_METADATA'} is unreadable or corrupt ({e})") from e
    first_keys = {entry["key_metadata"][0]["key"] for entry in tree.values()}
    return bool(first_keys & {"target", "state", *_STATE_KEYS})


def _unpack_msgpack(file: Path) -> Any:
    """Decodes a flax msgpack file, turning truncation/corruption into one line."""
    from flax import serialization

    data = file.read_bytes()
    if not _starts_with_msgpack_map(data[:1]):
        raise CheckpointError(f"{file} is not a T5X checkpoint; tried {_FORMATS_TRIED}")
    try:
        return serialization.msgpack_restore(data)
    except (ValueError, TypeError, msgpack.ExtraData, msgpack.FormatError) as e:
        raise _corrupt(file, e) from e


def _find_state(raw: Any, location: Path) -> dict:
    """Returns the `{'target', 'state'}` dict wherever this T5X version nested it."""
    if isinstance(raw, dict):
        for key in _STATE_KEYS:
            if isinstance(raw.get(key), dict):
                return raw[key]
        if "target" in raw:
            return raw
    raise CheckpointError(
        f"{location} is msgpack but holds no T5X state ('optimizer'/'target' keys); "
        "is it a T5X checkpoint?"
    )


# ---------------------------------------------------------------- reading leaves


class _LeafReader:
    """Turns inline arrays, TensorStore specs and PLACEHOLDER names into numpy arrays."""

    def __init__(self, checkpoint_dir: Path, version: int, array_hints: Mapping[str, Any]):
        self.checkpoint_dir = checkpoint_dir
        self.version = version
        self.array_hints = array_hints

    def materialize(self, tree: Any, path: tuple[str, ...]) -> Any:
        if isinstance(tree, dict) and not _is_tensorstore_spec(tree):
            children = {k: self.materialize(v, (*path, k)) for k, v in tree.items()}
            return {k: v for k, v in children.items() if v is not None}
        if tree is None:
            return None
        if isinstance(tree, dict):
            return self._read_spec(tree, path)
        if isinstance(tree, str) and tree.startswith(_PLACEHOLDER):
            return self._read_placeholder(tree[len(_PLACEHOLDER) :])
        return np.asarray(tree)

    def _read_spec(self, spec: dict, path: tuple[str, ...]) -> np.ndarray:
        spec = json.loads(json.dumps(spec))  # a private, JSON-clean copy we may edit
        kvstore = spec.get("kvstore", {})
        relative = kvstore.get("path", spec.pop("path", None))
        if relative is None:
            raise CheckpointError(f"{'.'.join(path)}: tensorstore spec without a path")
        directory = self._locate(relative)
        spec["kvstore"] = {"driver": "file", "path": str(directory) + "/"}
        if (directory / ".zarray").is_file():
            spec.pop("metadata", None)
            array = _ts_read(spec, directory, assume_metadata=False)
        else:
            array = _ts_read(spec, directory, assume_metadata=True)
        if self.version < 3 and array.dtype == np.uint16:
            import ml_dtypes  # version 2 stored bfloat16 as its raw uint16 bits

            array = array.view(ml_dtypes.bfloat16)
        return array

    def _read_placeholder(self, name: str) -> np.ndarray:
        directory = self.checkpoint_dir / name
        if not directory.is_dir():
            raise CheckpointError(f"{directory} is missing (array '{name}' of the checkpoint)")
        spec = {"driver": "zarr", "kvstore": {"driver": "file", "path": str(directory) + "/"}}
        if (directory / ".zarray").is_file():
            return _ts_read(spec, directory, assume_metadata=False)
        hint = self.array_hints.get(name)
        if hint is None:
            raise CheckpointError(
                f"{directory} has no .zarray header and the checkpoint names no shape/dtype; "
                f"pass array_hints={{'{name}': jax.ShapeDtypeStruct(shape, dtype)}}"
            )
        shape = [int(d) for d in hint.shape]
        spec["dtype"] = np.dtype(hint.dtype).name
        spec["metadata"] = {
            "shape": shape,
            "chunks": _chunk_shape_from_files(directory, shape),
            "compressor": _guess_compressor(directory),
        }
        return _ts_read(spec, directory, assume_metadata=True)

    def _locate(self, relative: str) -> Path:
        """Specs hold paths relative to the checkpoint dir (or absolute ones from a moved copy)."""
        candidate = Path(relative.rstrip("/"))
        if not candidate.is_absolute():
            return self.checkpoint_dir / candidate
        return candidate if candidate.is_dir() else self.checkpoint_dir / candidate.name


def _is_tensorstore_spec(node: dict) -> bool:
    return "driver" in node and ("kvstore" in node or "path" in node)


def _ts_read(spec: dict, directory: Path, assume_metadata: bool) -> np.ndarray:
    import tensorstore as ts

    try:
        store = ts.open(spec, open=True, read=True, assume_metadata=assume_metadata).result()
        return np.asarray(store.read().result())
    except (ValueError, RuntimeError, OSError) as e:
        reason = str(e).splitlines()[0][:200]
        raise CheckpointError(f"{directory} is truncated or corrupt ({reason})") from e


def _chunk_shape_from_files(directory: Path, shape: list[int]) -> list[int]:
    """Infers the zarr chunk grid from chunk file names like '0.1' (no header to ask)."""
    if not shape:
        return []
    counts = [1] * len(shape)
    for chunk in directory.iterdir():
        parts = chunk.name.split(".")
        if len(parts) == len(shape) and all(p.isdigit() for p in parts):
            counts = [max(c, int(p) + 1) for c, p in zip(counts, parts, strict=True)]
    return [math.ceil(size / count) for size, count in zip(shape, counts, strict=True)]


def _guess_compressor(directory: Path) -> dict | None:
    """zstd (Orbax) or gzip (older T5X), told apart by the chunk file's magic bytes."""
    for chunk in sorted(directory.iterdir()):
        if chunk.name.startswith("."):
            continue
        with chunk.open("rb") as f:
            magic = f.read(4)
        if magic == b"\x28\xb5\x2f\xfd":
            return {"id": "zstd", "level": 1}
        if magic[:2] == b"\x1f\x8b":
            return {"id": "gzip", "level": 1}
        return None
    return None


def _read_orbax(directory: Path, with_optimizer_state: bool) -> dict:
    """Restores an Orbax PyTree as numpy, skipping optimizer slots unless asked for."""
    import jax
    import orbax.checkpoint as ocp

    checkpointer = ocp.PyTreeCheckpointer()
    try:
        metadata = checkpointer.metadata(directory).item_metadata.tree
    except (ValueError, OSError, KeyError) as e:
        raise CheckpointError(f"{directory} has unreadable Orbax metadata ({e})") from e
    holder_key = next((k for k in _STATE_KEYS if k in metadata), None)
    state_meta = metadata[holder_key] if holder_key else metadata
    wanted = {"target": state_meta.get("target", {})}
    if "state" in state_meta:
        slots = state_meta["state"]
        wanted["state"] = slots if with_optimizer_state else {"step": slots["step"]}
    if holder_key:
        wanted = {holder_key: wanted}
    item = jax.tree.map(lambda m: jax.ShapeDtypeStruct(m.shape, m.dtype), wanted)
    restore_args = jax.tree.map(lambda m: ocp.RestoreArgs(restore_type=np.ndarray), wanted)
    try:
        restored = checkpointer.restore(
            directory,
            args=ocp.args.PyTreeRestore(item=item, restore_args=restore_args, partial_restore=True),
        )
    except (ValueError, OSError, RuntimeError) as e:
        reason = str(e).splitlines()[0][:200]
        raise CheckpointError(f"{directory} is truncated or corrupt ({reason})") from e
    return restored[holder_key] if holder_key else restored


# ---------------------------------------------------------------- converting the tree


def _as_float32_tree(tree: Any) -> Any:
    if isinstance(tree, dict):
        return {k: _as_float32_tree(v) for k, v in tree.items()}
    return np.asarray(tree, dtype=np.float32)


def _is_scanned(params: dict) -> bool:
    """`scan_layers` checkpoints hold one stacked `layers` subtree instead of `layers_N`."""
    return any(
        isinstance(params.get(s), dict) and "layers" in params[s] for s in ("encoder", "decoder")
    )


def _unstack_scanned(params: dict, opt_state: dict | None) -> tuple[dict, dict | None]:
    """Splits T5X's stacked layers (layer axis at position 1) into `layers_N` subtrees."""
    from t5forge.models.param_layout import unstack_layers

    per_layer = unstack_layers(params)
    if opt_state is not None:
        slots = opt_state["param_states"]
        unstacked = {}
        for name, subtree in slots.items():
            if name in ("encoder", "decoder") and "layers" in subtree:
                layers = _split_slot_tree(subtree["layers"], params[name]["layers"])
                subtree = {k: v for k, v in subtree.items() if k != "layers"}
                subtree.update({f"layers_{i}": layer for i, layer in enumerate(layers)})
            unstacked[name] = subtree
        opt_state = {**opt_state, "param_states": unstacked}
    return per_layer, opt_state


def _split_slot_tree(slots: dict, scanned: Any) -> list[dict]:
    """Per-layer Adafactor slot trees from the slots of one scanned `layers` subtree."""
    if not isinstance(scanned, dict):
        num_layers = scanned.shape[1]
        split = {k: _split_slot(v, scanned.shape) for k, v in slots.items()}
        return [{k: split[k][i] for k in split} for i in range(num_layers)]
    children = {k: _split_slot_tree(slots[k], scanned[k]) for k in slots}
    num_layers = len(next(iter(children.values())))
    return [{k: children[k][i] for k in children} for i in range(num_layers)]


def _split_slot(slot: np.ndarray, param_shape: tuple[int, ...]) -> list[np.ndarray]:
    """Factored slots drop the reduced axes, so the layer axis may sit at 0 or 1."""
    num_layers = param_shape[1]
    if slot.shape == (1,):  # an unused slot: T5X stores one placeholder per parameter
        return [slot] * num_layers
    dropped = len(param_shape) - slot.ndim
    candidates = [a for a in range(len(param_shape)) if a != 1]
    layer_axes = {
        1 - sum(a < 1 for a in removed)
        for removed in itertools.combinations(candidates, dropped)
        if tuple(d for a, d in enumerate(param_shape) if a not in removed) == slot.shape
    }
    if len(layer_axes) != 1:
        raise CheckpointError(
            f"cannot tell the layer axis of an optimizer slot of shape {slot.shape} for a "
            f"scanned parameter of shape {param_shape}; load without the optimizer state"
        )
    axis = layer_axes.pop()
    return [np.take(slot, i, axis=axis) for i in range(num_layers)]


def infer_config(params: dict, **overrides):
    """Builds the T5Config a T5X params tree implies (T5X checkpoints carry no config).

    Per-layer or scanned trees both work. Not inferable and left at T5Config's defaults:
    `dtype`, `dropout_rate`, `relative_attention_max_distance`, and the exact activation of a
    gated MLP (assumed T5 1.1's gated GELU); pass `overrides` to change any field. A mixture
    of experts (Flaxformer's `mlp/expert/...` in some layers) gets its expert count, widths and
    sparse layers; its routing (T5X's groups, capacity factors, router kind) stays at the
    defaults, which a gin file or `overrides` changes. A LongT5 transient-global encoder shows
    by its `side_relpos_bias` and gets LongT5's published local_radius and global_block_size
    (127, 16); a local one holds T5's tensors exactly, so it reads as T5 unless `overrides` say
    encoder_attention='local'.
    """
    from t5forge.models.configs import T5Config

    try:
        vocab_size, emb_dim = params["token_embedder"]["embedding"].shape
        decoder = params["decoder"]
        encoder = params.get("encoder")
        first = _first_layer(decoder)
        attention = first["self_attention"]
        relpos = decoder.get("relpos_bias", {}).get("rel_embedding")
        if relpos is None:  # scalable_t5 keeps one table per layer: [heads, (layers,) buckets]
            relpos = first["relative_posemb"]["rel_embedding"]
        num_heads, num_buckets = relpos.shape[0], relpos.shape[-1]
        mlp, experts = _mlp_and_experts(decoder, encoder)
        values = dict(
            vocab_size=int(vocab_size),
            emb_dim=int(emb_dim),
            num_heads=int(num_heads),
            num_encoder_layers=_num_layers(encoder) if encoder else 0,
            num_decoder_layers=_num_layers(decoder),
            head_dim=int(attention["query"]["kernel"].shape[-1]) // int(num_heads),
            # [mlp, (layers,) emb]; an expert's [experts, (layers,) mlp, emb]
            mlp_dim=int(mlp["wo"]["kernel"].shape[-2 if mlp is experts else 0]),
            mlp_activations=("gelu", "linear") if "wi_0" in mlp else ("relu",),
            logits_via_embedding="logits_dense" not in decoder,
            relative_attention_num_buckets=int(num_buckets),
            scan_layers="layers" in decoder,
            architecture="encoder_decoder" if encoder else "decoder_only",
        )
        if encoder and "side_relpos_bias" in encoder:
            values["encoder_attention"] = "transient_global"
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise CheckpointError(
            f"cannot infer a T5 config from these params (missing or odd {e}); "
            "pass the model config explicitly"
        ) from e
    if experts:
        values.update(_expert_fields(experts, encoder, decoder))
    values.update(overrides)
    return T5Config(**values)


def _layers(stack: dict) -> list[dict]:
    if "layers" in stack:
        return [stack["layers"]]
    return [stack[f"layers_{i}"] for i in range(_num_layers(stack))]


def _is_sparse(layer: dict) -> bool:
    return "expert" in layer["mlp"]


def _mlp_and_experts(*stacks) -> tuple[dict, dict | None]:
    """(a dense layer's `mlp`, or the experts' when every layer is sparse; a sparse layer's
    `mlp/expert`, or None for a dense model)."""
    layers = [layer for stack in stacks if stack for layer in _layers(stack)]
    experts = next((layer["mlp"]["expert"] for layer in layers if _is_sparse(layer)), None)
    dense = next((layer["mlp"] for layer in layers if not _is_sparse(layer)), None)
    return (experts if dense is None else dense), experts


def _expert_fields(experts: dict, encoder: dict | None, decoder: dict) -> dict:
    """The T5Config MoE fields a Flaxformer sparse params tree implies: experts, their width,
    ST-MoE's extra MLP, and each stack's sparse layers as a count and the first of Flaxformer's
    layouts (then Hugging Face's) that places them so."""
    from t5forge.models.configs import SPARSE_LAYOUTS
    from t5forge.models.sparse_layout import sparse_layer_flags

    fields = {
        "num_experts": int(experts["wo"]["kernel"].shape[0]),
        "expert_mlp_dim": int(experts["wo"]["kernel"].shape[-2]),
    }
    for name, stack in (("encoder", encoder), ("decoder", decoder)):
        if not stack:
            continue
        layers = _layers(stack)
        num_layers = _num_layers(stack)
        flags = tuple(_is_sparse(layer) for layer in layers) * (num_layers // len(layers))
        fields["sparse_extra_mlp"] = fields.get("sparse_extra_mlp") or any(
            "extra_mlp" in layer for layer in layers
        )
        count = sum(flags)
        for layout in SPARSE_LAYOUTS:
            try:
                placed = sparse_layer_flags(num_layers, count, layout)
            except ValueError:
                continue
            if placed == flags:
                fields[f"num_sparse_{name}_layers"] = count
                fields[f"{name}_sparse_layout"] = layout
                break
        else:
            where = [i for i, sparse in enumerate(flags) if sparse]
            raise CheckpointError(
                f"the {name}'s sparse layers {where} follow none of the layouts "
                f"{SPARSE_LAYOUTS}; pass the model config explicitly"
            )
    return fields


def _first_layer(stack: dict) -> dict:
    return stack["layers"] if "layers" in stack else stack["layers_0"]


def _num_layers(stack: dict) -> int:
    if "layers" in stack:  # scanned: every leaf has the layer axis at position 1
        return int(stack["layers"]["pre_mlp_layer_norm"]["scale"].shape[1])
    return sum(1 for k in stack if re.fullmatch(r"layers_\d+", k))
