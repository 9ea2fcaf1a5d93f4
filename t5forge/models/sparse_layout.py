"""Which layers of a stack hold a mixture of experts: Flaxformer's layouts and Hugging Face's.

Flaxformer (moe_architecture, `LayerLayout`) places `num_sparse` sparse layers among
`num_layers` at the bottom, the top, the middle, or every (num_layers // num_sparse)-th layer
ending each period ('mixed': layer l when l % step == step - 1). Hugging Face's
SwitchTransformers makes layer i sparse when i % step == 1 (or step == 1), step being
num_layers // num_sparse; the two agree for steps 1 and 2 and differ from step 3 on.
"""

from __future__ import annotations

from t5forge.errors import ConfigError


def sparse_layer_flags(
    num_layers: int, num_sparse: int, layout: str, field: str = "num_sparse_layers"
) -> tuple[bool, ...]:
    """For each of `num_layers` layers, whether `layout` makes it sparse; `field` names the
    count in the error a bad count raises."""
    if not isinstance(num_sparse, int) or isinstance(num_sparse, bool) or num_sparse < 0:
        raise ConfigError(f"{field} must be an integer >= 0, got {num_sparse!r}")
    if num_sparse > num_layers:
        raise ConfigError(f"{field} is {num_sparse} but the stack has only {num_layers} layers")
    if num_sparse == 0:
        return (False,) * num_layers
    layers = range(num_layers)
    if layout == "bottom":
        return tuple(layer < num_sparse for layer in layers)
    if layout == "top":
        return tuple(layer >= num_layers - num_sparse for layer in layers)
    if layout == "middle":
        return tuple(
            num_layers - num_sparse <= 2 * layer < num_layers + num_sparse for layer in layers
        )
    step = num_layers // num_sparse
    if layout == "huggingface":
        return tuple(step == 1 or layer % step == 1 for layer in layers)
    if num_layers % num_sparse:
        raise ConfigError(
            f"{field} ({num_sparse}) must divide the stack's {num_layers} layers for the "
            "'mixed' layout (a sparse layer every num_layers // num_sparse layers)"
        )
    return tuple(layer % step == step - 1 for layer in layers)


def huggingface_sparse_count(flags: tuple[bool, ...]) -> int | None:
    """The num_sparse_*_layers whose Hugging Face rule gives exactly `flags`; None if none does."""
    for count in range(len(flags) + 1):
        if sparse_layer_flags(len(flags), count, "huggingface") == tuple(flags):
            return count
    return None
