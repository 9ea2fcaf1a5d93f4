"""Parameter names as T5X writes them ('encoder/layers_0/mlp/wi/kernel'), and shape checks.

The one place that turns pytree paths into names and compares a parameter tree with what a
model expects, so checkpoints, summaries, optimizers, conversion and the model agree on every
name and report a mismatch the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import jax
import numpy as np


def key_name(key) -> str:
    """One path entry as text: a dict key, an attribute name or a sequence index."""
    return str(getattr(key, "key", getattr(key, "name", getattr(key, "idx", key))))


def path_name(path) -> str:
    """A pytree path as T5X's slash-separated name."""
    return "/".join(key_name(k) for k in path)


def named_leaves(tree, is_leaf: Callable[[Any], bool] | None = None) -> dict[str, Any]:
    """{'encoder/layers_0/mlp/wi/kernel': leaf, ...} in the tree's flattening order."""
    flat = jax.tree_util.tree_flatten_with_path(tree, is_leaf=is_leaf)[0]
    return {path_name(path): leaf for path, leaf in flat}


def unflatten_like(tree, named: Mapping[str, Any]):
    """A tree shaped like `tree` whose leaves are `named[<name of that leaf>]`."""
    names = list(named_leaves(tree))
    return jax.tree.unflatten(jax.tree.structure(tree), [named[name] for name in names])


def shapes(tree) -> dict[str, tuple[int, ...]]:
    """Every leaf's shape by name (arrays, ShapeDtypeStructs or orbax metadata)."""
    return {
        name: tuple(np.shape(leaf) if not hasattr(leaf, "shape") else leaf.shape)
        for name, leaf in named_leaves(tree).items()
    }


def shape_mismatch(
    expected: Mapping[str, tuple], given: Mapping[str, tuple], allow_extra: bool = False
) -> str | None:
    """The first difference between two name -> shape maps, as text; None when they agree.

    Callers say whose shapes `given` are and what to do; this says which parameter differs.
    """
    for name, shape in expected.items():
        if name not in given:
            return f"has no parameter {name!r} (the model expects shape {tuple(shape)})"
        if tuple(given[name]) != tuple(shape):
            return (
                f"has {name!r} with shape {tuple(given[name])} but the model expects {tuple(shape)}"
            )
    extra = sorted(set(given) - set(expected))
    if extra and not allow_extra:
        return (
            f"has {extra[0]!r}, which this model does not use ({len(extra)} unexpected "
            "parameter(s) in all)"
        )
    return None
