"""The Python behind Flaxformer's gin names (and T5X's contrib/moe ones beside them).

Flaxformer builds a network from a tree of layer factories, each with its own gin bindings;
t5forge builds one network from one T5Config. So every hyperparameter the tree binds moves
onto a T5Config field (flaxformer_names.py), and the top of the tree, the architecture that
a model's `module` names, returns that T5Config. The layers below it are never called: they
are named by the architecture's bindings only.
"""

from __future__ import annotations

import enum
import math

import gin

from t5forge.gin_config.gin_registry import config_from_gin
from t5forge.models.configs import T5Config


def network(name: str):
    """A Flaxformer architecture (`t5_architecture.EncoderDecoder()`): it returns the T5Config
    its layers' bindings were moved onto (one function per gin name, as gin requires)."""

    def build(**unused) -> T5Config:
        return config_from_gin()

    build.__name__ = build.__qualname__ = name
    return build


@gin.constants_from_enum(module="flaxformer.architectures.moe.moe_enums")
class LayerLayout(enum.Enum):
    """Flaxformer's `moe_enums.LayerLayout` (gin constants `%moe_enums.LayerLayout.MIXED`, as
    Flaxformer declares them): where a stack's sparse layers lie."""

    BOTTOM = "bottom"
    MIDDLE = "middle"
    MIXED = "mixed"
    TOP = "top"


def layout_name(value) -> str:
    """`%moe_enums.LayerLayout.MIXED` as T5Config writes it: 'mixed'."""
    return value.value if isinstance(value, LayerLayout) else value


def compute_num_model_partitions(num_model_partitions=None, model_parallel_submesh=None) -> int:
    """T5X's `contrib.moe.partitioning.compute_num_model_partitions`: devices on the model
    axis, from whichever of the two is set."""
    if model_parallel_submesh:
        return math.prod(model_parallel_submesh)
    return num_model_partitions or 1


def selector_name(value) -> str | None:
    """The last name of a gin reference (`@long_attention.EncoderLocalSelfAttention` ->
    'EncoderLocalSelfAttention'); None for None."""
    if value is None:
        return None
    return value.configurable.selector.rsplit(".", 1)[-1]
