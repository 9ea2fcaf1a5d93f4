"""Converts params between the per-layer layout (`layers_0`, `layers_1`, ...) and the scanned one.

With `scan_layers` each stack holds one `layers` subtree whose arrays gain a layer axis at
position 1 (T5X's scanned layout: a [emb, joined_kv] kernel becomes [emb, layers, joined_kv]).
Importers and exporters only ever deal with the per-layer layout and call these two functions at
the boundary, so scanned checkpoints convert to Hugging Face like any other.
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np

from t5forge.errors import CheckpointError
from t5forge.models.configs import T5Config

LAYER_AXIS = 1
STACKS = ("encoder", "decoder")
_LAYER_NAME = re.compile(r"layers_(\d+)$")


def _array_module(leaf):
    return np if isinstance(leaf, np.ndarray) else jnp


def _stack(trees):
    return jax.tree_util.tree_map(
        lambda *leaves: _array_module(leaves[0]).stack(leaves, axis=LAYER_AXIS), *trees
    )


def _unstack(tree, num_layers: int):
    return [
        jax.tree_util.tree_map(lambda leaf, i=i: leaf.take(i, axis=LAYER_AXIS), tree)
        for i in range(num_layers)
    ]


def stack_layers(params: dict, config: T5Config) -> dict:
    """Per-layer params -> the layout `config` runs with (scanned when config.scan_layers)."""
    if not config.scan_layers:
        return params
    out = dict(params)
    for stack in STACKS:
        subtree = params.get(stack)
        if not subtree or "layers_0" not in subtree:
            continue
        names = sorted(
            (k for k in subtree if _LAYER_NAME.match(k)),
            key=lambda k: int(_LAYER_NAME.match(k).group(1)),
        )
        rest = {k: v for k, v in subtree.items() if not _LAYER_NAME.match(k)}
        out[stack] = {**rest, "layers": _stack([subtree[k] for k in names])}
    return out


def unstack_layers(params: dict, config: T5Config | None = None) -> dict:
    """Scanned params (a `layers` subtree per stack) -> `layers_0..N-1`; per-layer is unchanged.

    The number of layers is read from the arrays; given a `config`, it must match the config's
    layer counts (CheckpointError otherwise).
    """
    out = dict(params)
    for stack in STACKS:
        subtree = params.get(stack)
        if not subtree or "layers" not in subtree:
            continue
        scanned = subtree["layers"]
        num_layers = jax.tree_util.tree_leaves(scanned)[0].shape[LAYER_AXIS]
        expected = None if config is None else getattr(config, f"num_{stack}_layers")
        if expected is not None and num_layers != expected:
            raise CheckpointError(
                f"{stack}/layers holds {num_layers} scanned layers but the "
                f"config has num_{stack}_layers={expected}"
            )
        rest = {k: v for k, v in subtree.items() if k != "layers"}
        layers = _unstack(scanned, num_layers)
        out[stack] = {**rest, **{f"layers_{i}": layer for i, layer in enumerate(layers)}}
    return out
