"""A family's tensor map applied: transformers state dict <-> t5forge's nested params.

Each Hugging Face family module (huggingface.py for T5, hf_t5gemma.py, hf_t5gemma2.py) lists
its tensors as (HF name, T5X path, T5X shape, whether HF holds it transposed) entries; the walk
over them, with its one-line errors for a missing, misshapen or unexpected tensor, is here.
"""

from __future__ import annotations

import numpy as np

from t5forge.errors import CheckpointError
from t5forge.models.configs import T5Config
from t5forge.models.param_layout import stack_layers, unstack_layers
from t5forge.models.param_names import path_name


def params_from_entries(state_dict: dict, config: T5Config, entries: list, ignorable: set) -> dict:
    """Nested params from a state dict by a family's tensor map: (HF name, T5X path, T5X
    shape, transposed) entries; tensors in `ignorable` may be present and are not read."""
    params: dict = {}
    for hf_name, path, shape, transposed in entries:
        if hf_name not in state_dict:
            raise CheckpointError(
                f"Hugging Face checkpoint lacks tensor {hf_name!r} "
                f"(needed for {path_name(path)} {shape}); it was saved from a "
                f"model with another config"
            )
        value = np.asarray(state_dict[hf_name], dtype=np.float32)
        if transposed:
            value = value.T
        if value.shape != shape:
            hf_shape = tuple(reversed(shape)) if transposed else shape
            raise CheckpointError(
                f"Hugging Face tensor {hf_name!r} has shape "
                f"{tuple(np.shape(state_dict[hf_name]))} but the config needs "
                f"{hf_shape}; the config does not match the checkpoint"
            )
        node = params
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = np.ascontiguousarray(value)
    known = {entry[0] for entry in entries} | ignorable
    unexpected = sorted(set(state_dict) - known)
    if unexpected:
        raise CheckpointError(
            f"Hugging Face checkpoint has tensor {unexpected[0]!r} that a "
            f"model with this config does not have (check the layer counts)"
        )
    return stack_layers(params, config)


def _leaf(params: dict, path: tuple):
    node = params
    for key in path:
        if not isinstance(node, dict) or key not in node:
            raise CheckpointError(
                f"params lack {path_name(path)}; they do not belong to a model with this config"
            )
        node = node[key]
    return node


def state_dict_from_entries(params: dict, config: T5Config, entries: list) -> dict:
    """A state dict (float32 numpy) from nested params by a family's tensor map (see
    params_from_entries); scanned params are split into their layers first."""
    params = unstack_layers(params, config)
    state_dict = {}
    for hf_name, path, shape, transposed in entries:
        value = np.asarray(_leaf(params, path), dtype=np.float32)
        if value.shape != shape:
            raise CheckpointError(
                f"param {path_name(path)} has shape {value.shape} but the "
                f"config needs {shape}; the config does not match the params"
            )
        state_dict[hf_name] = np.ascontiguousarray(value.T if transposed else value)
    return state_dict
