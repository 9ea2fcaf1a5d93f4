"""Optimizers: Adafactor with T5X semantics, and AdamW, as optax transformations.

T5 models were trained with T5X's Adafactor; matching it to the last detail (factored second
moments chosen by logical axes, parameter-scale steps, update clipping, the 1 - (t+1)^-0.8 decay)
is what makes T5X recipes and learning rates carry over, and what lets a T5X optimizer state
(slots `v_row`, `v_col`, `v`, `m`, unused ones stored as shape (1,) zeros) be imported as is.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
import optax

from t5forge.errors import ConfigError
from t5forge.models import param_names

ROW, COLUMN, BATCH, NONE = "row", "column", "batch", "none"

# How each logical axis takes part in factoring the second moment (T5X's standard rules, and
# contrib/moe's adafactor_utils.logical_factor_rules for sparse layers).
LOGICAL_FACTOR_RULES: dict[str, str] = {
    "vocab": COLUMN,
    "mlp": COLUMN,
    "heads": COLUMN,
    "kv": COLUMN,
    "joined_kv": COLUMN,
    "embed": ROW,
    "layers": BATCH,
    "stack": BATCH,
    "relpos_buckets": NONE,
    # T5X contrib/moe's additions: each expert keeps its own factored moments and scale.
    "expert": BATCH,
    "expert_mlp": COLUMN,
    "unmodeled": NONE,
}

LearningRate = float | Callable[[jax.Array], jax.Array]


class FactorPlan(NamedTuple):
    """Which dims a factored second moment averages away (static, derived from shape + axes).

    `row_reduced` are the dims `v_col` averages over, `col_reduced` the dims `v_row` averages
    over; `averaging` are the dims the parameter scale and update clipping average over
    (everything except batch-like dims such as scanned layers).
    """

    averaging: tuple[int, ...]
    row_reduced: tuple[int, ...]
    col_reduced: tuple[int, ...]

    @property
    def factored(self) -> bool:
        return bool(self.row_reduced or self.col_reduced)


@flax.struct.dataclass
class AdafactorSlots:
    """Per-parameter Adafactor state; the factoring plan rides along as static metadata."""

    v_row: jax.Array
    v_col: jax.Array
    v: jax.Array
    m: jax.Array
    plan: FactorPlan = flax.struct.field(pytree_node=False)

    def logical_axes(self, param_axes: tuple) -> AdafactorSlots:
        """Logical axes of each slot: factored slots drop the dims they average away."""
        replicated = (None,)

        def without(dims):
            return tuple(name for i, name in enumerate(param_axes) if i not in dims)

        if self.plan.factored:
            v_row, v_col = without(self.plan.col_reduced), without(self.plan.row_reduced)
            v = replicated
        else:
            v_row, v_col, v = replicated, replicated, tuple(param_axes)
        m = tuple(param_axes) if self.m.shape != (1,) else replicated
        return AdafactorSlots(v_row=v_row, v_col=v_col, v=v, m=m, plan=self.plan)


class AdafactorState(NamedTuple):
    """Step counter plus one `AdafactorSlots` per parameter (same tree as the parameters)."""

    count: jax.Array
    param_states: Any


def _heuristic_plan(shape: tuple[int, ...], min_dim_size_to_factor: int) -> FactorPlan:
    """Classic Adafactor: factor over the two largest dims if both are big enough."""
    everything = tuple(range(len(shape)))
    if len(shape) < 2:
        return FactorPlan(everything, (), ())
    order = np.argsort(shape, kind="stable")
    second, largest = int(order[-2]), int(order[-1])
    if shape[second] < min_dim_size_to_factor:
        return FactorPlan(everything, (), ())
    return FactorPlan(everything, (second,), (largest,))


def factor_plan(
    shape: tuple[int, ...],
    logical_axes: tuple | None,
    factored: bool = True,
    min_dim_size_to_factor: int = 128,
) -> FactorPlan:
    """Decides how a parameter's second moment is stored, exactly as T5X does.

    With logical axes, rows/columns/batch dims come from `LOGICAL_FACTOR_RULES`; a parameter with
    rows but no columns (or the reverse) is not factored. Like T5X, parameters of rank <= 2
    without batch dims still use the size heuristic, so ordinary kernels factor identically with
    or without axes. Unknown axis names are treated as not factored.
    """
    everything = tuple(range(len(shape)))
    if not factored:
        return FactorPlan(everything, (), ())
    if logical_axes is None:
        return _heuristic_plan(shape, min_dim_size_to_factor)
    if len(logical_axes) != len(shape):
        raise ConfigError(
            f"logical axes {tuple(logical_axes)} do not match parameter shape {tuple(shape)}; "
            "give one axis name per dimension"
        )
    kinds = [LOGICAL_FACTOR_RULES.get(name, NONE) for name in logical_axes]
    if ROW in kinds and COLUMN in kinds and NONE in kinds:
        raise ConfigError(
            f"logical axes {tuple(logical_axes)} mix factored and unfactored dims; map every "
            "non-batch axis to row or column in LOGICAL_FACTOR_RULES"
        )
    if ROW not in kinds or COLUMN not in kinds:
        kinds = [NONE if kind in (ROW, COLUMN) else kind for kind in kinds]
    batch = tuple(i for i, kind in enumerate(kinds) if kind == BATCH)
    if len(shape) <= 2 and not batch:
        return _heuristic_plan(shape, min_dim_size_to_factor)
    averaging = tuple(i for i in everything if i not in batch)
    rows = tuple(i for i, kind in enumerate(kinds) if kind == ROW)
    columns = tuple(i for i, kind in enumerate(kinds) if kind == COLUMN)
    return FactorPlan(averaging, rows, columns)


def _unused_slot() -> jax.Array:
    return jnp.zeros((1,), jnp.float32)


def _init_slots(param: jax.Array, plan: FactorPlan, momentum: bool) -> AdafactorSlots:
    shape = param.shape
    if plan.factored:
        v_row = jnp.zeros(np.delete(shape, plan.col_reduced), jnp.float32)
        v_col = jnp.zeros(np.delete(shape, plan.row_reduced), jnp.float32)
        v = _unused_slot()
    else:
        v_row, v_col, v = _unused_slot(), _unused_slot(), jnp.zeros(shape, jnp.float32)
    m = jnp.zeros(shape, jnp.float32) if momentum else _unused_slot()
    return AdafactorSlots(v_row=v_row, v_col=v_col, v=v, m=m, plan=plan)


def adafactor(
    learning_rate: LearningRate,
    *,
    factored: bool = True,
    multiply_by_parameter_scale: bool = True,
    beta1: float | None = None,
    decay_rate: float = 0.8,
    clipping_threshold: float | None = 1.0,
    min_dim_size_to_factor: int = 128,
    epsilon1: float = 1e-30,
    epsilon2: float = 1e-3,
    global_norm_clip_threshold: float | None = None,
    param_logical_axes: Any = None,
) -> optax.GradientTransformation:
    """Adafactor as T5X defines it; `update` needs `params` and returns additive updates.

    `param_logical_axes` is a tree (same structure as the parameters) of tuples of logical axis
    names; it decides which dims are rows, columns and batch (e.g. scanned `layers`).
    `global_norm_clip_threshold` clips gradients by their global norm before any statistics,
    inside this transformation so the state keeps T5X's layout.
    """

    def plans_for(params):
        if param_logical_axes is None:
            return jax.tree.map(
                lambda p: factor_plan(p.shape, None, factored, min_dim_size_to_factor), params
            )
        return jax.tree.map(
            lambda p, axes: factor_plan(p.shape, axes, factored, min_dim_size_to_factor),
            params,
            param_logical_axes,
        )

    def init(params):
        plans = plans_for(params)
        slots = jax.tree.map(
            lambda p, plan: _init_slots(p, plan, beta1 is not None),
            params,
            plans,
            is_leaf=lambda x: isinstance(x, FactorPlan),
        )
        return AdafactorState(count=jnp.zeros([], jnp.int32), param_states=slots)

    def update(grads, state, params=None):
        if params is None:
            raise ConfigError("adafactor needs the parameters: call update(grads, state, params)")
        if global_norm_clip_threshold:
            norm = optax.tree.norm(grads)
            scale = jnp.minimum(1.0, global_norm_clip_threshold / norm)
            grads = jax.tree.map(lambda g: g * scale, grads)
        step_size = learning_rate(state.count) if callable(learning_rate) else learning_rate
        decay = 1.0 - (state.count.astype(jnp.float32) + 1.0) ** (-decay_rate)

        def update_one(grad, param, slots: AdafactorSlots):
            plan = slots.plan
            grad = grad.astype(jnp.float32)
            param = param.astype(jnp.float32)
            scale = step_size
            if multiply_by_parameter_scale:
                rms = jnp.sqrt(jnp.mean(param * param, axis=plan.averaging, keepdims=True))
                scale = scale * jnp.maximum(rms, epsilon2)
            grad_sqr = grad * grad + epsilon1
            new = {"v_row": slots.v_row, "v_col": slots.v_col, "v": slots.v, "m": slots.m}
            if plan.factored:
                new["v_row"] = decay * slots.v_row + (1 - decay) * jnp.mean(
                    grad_sqr, axis=plan.col_reduced
                )
                new["v_col"] = decay * slots.v_col + (1 - decay) * jnp.mean(
                    grad_sqr, axis=plan.row_reduced
                )
                rows_in_v_row = tuple(
                    d - sum(c < d for c in plan.col_reduced) for d in plan.row_reduced
                )
                row_mean = jnp.mean(new["v_row"], axis=rows_in_v_row, keepdims=True)
                row_factor = jax.lax.rsqrt(new["v_row"] / row_mean)
                col_factor = jax.lax.rsqrt(new["v_col"])
                y = (
                    grad
                    * jnp.expand_dims(row_factor, plan.col_reduced)
                    * jnp.expand_dims(col_factor, plan.row_reduced)
                )
            else:
                new["v"] = decay * slots.v + (1 - decay) * grad_sqr
                y = grad * jax.lax.rsqrt(new["v"])
            if clipping_threshold is not None:
                rms_y = jnp.sqrt(jnp.mean(y * y, axis=plan.averaging, keepdims=True))
                y = y / jnp.maximum(1.0, rms_y / clipping_threshold)
            step = scale * y
            if beta1 is not None:
                new["m"] = beta1 * slots.m + (1.0 - beta1) * step
                step = new["m"]
            return -step, AdafactorSlots(**new, plan=plan)

        results = jax.tree.map(
            update_one,
            grads,
            params,
            state.param_states,
            is_leaf=lambda x: isinstance(x, AdafactorSlots),
        )
        treedef = jax.tree.structure(grads)
        pairs = treedef.flatten_up_to(results)
        updates = treedef.unflatten([u for u, _ in pairs])
        slots = treedef.unflatten([s for _, s in pairs])
        return updates, AdafactorState(count=state.count + 1, param_states=slots)

    return optax.GradientTransformation(init, update)


_NO_DECAY_PATTERN = re.compile(r"(^|/)(scale|bias)$|norm")


def decay_mask(params) -> Any:
    """True for parameters AdamW should decay: not layer-norm scales, not biases."""

    def keep(path, _):
        return not _NO_DECAY_PATTERN.search(param_names.path_name(path))

    return jax.tree_util.tree_map_with_path(keep, params)


def adamw(
    learning_rate: LearningRate,
    *,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-8,
    weight_decay: float = 0.0,
    global_norm_clip_threshold: float | None = None,
) -> optax.GradientTransformation:
    """AdamW whose weight decay skips norms and biases; optional global-norm gradient clipping."""
    tx = optax.adamw(
        learning_rate, b1=b1, b2=b2, eps=eps, weight_decay=weight_decay, mask=decay_mask
    )
    if global_norm_clip_threshold:
        return optax.chain(optax.clip_by_global_norm(global_norm_clip_threshold), tx)
    return tx


OPTIMIZERS: Mapping[str, Callable[..., optax.GradientTransformation]] = {
    "adafactor": adafactor,
    "adamw": adamw,
}


def create_optimizer(
    name: str, learning_rate: LearningRate, param_logical_axes: Any = None, **options
) -> optax.GradientTransformation:
    """Builds an optimizer by name (`t5forge.train(optimizer='adamw')`); unknown names list the
    known ones."""
    if name not in OPTIMIZERS:
        raise ConfigError(f"unknown optimizer {name!r}; choose one of {sorted(OPTIMIZERS)}")
    if name == "adafactor":
        return adafactor(learning_rate, param_logical_axes=param_logical_axes, **options)
    return OPTIMIZERS[name](learning_rate, **options)
