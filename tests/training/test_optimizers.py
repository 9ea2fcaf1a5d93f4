"""Adafactor reproduces T5X's golden numbers; factoring follows logical axes; AdamW skips norms."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from t5forge.errors import ConfigError
from t5forge.training.optimizers import (
    AdafactorState,
    adafactor,
    adamw,
    create_optimizer,
    decay_mask,
    factor_plan,
)


def _state_at_step_one(tx, params, **slots):
    """A state as T5X's adafactor_test builds it: step 1 with given slot values."""
    state = tx.init(params)
    values = {name: jnp.asarray(value, jnp.float32) for name, value in slots.items()}
    slot = state.param_states["x"].replace(**values)
    return AdafactorState(count=jnp.asarray(1, jnp.int32), param_states={"x": slot})


def test_factored_golden_matches_t5x():
    params = {"x": jnp.ones((3, 2), jnp.float32)}
    grads = {"x": jnp.ones((3, 2), jnp.float32)}
    tx = adafactor(0.1, decay_rate=0.8, min_dim_size_to_factor=0)
    state = _state_at_step_one(tx, params, v_row=[0.9, 0.9], v_col=[0.1, 0.1, 0.1])
    updates, new_state = tx.update(grads, state, params)
    new_params = optax.apply_updates(params, updates)
    slots = new_state.param_states["x"]
    np.testing.assert_allclose(new_params["x"], 0.9 * np.ones((3, 2)), rtol=1e-6)
    np.testing.assert_allclose(slots.v_row, [0.9574349] * 2, rtol=1e-6)
    np.testing.assert_allclose(slots.v_col, [0.6169143] * 3, rtol=1e-6)
    assert slots.v.shape == (1,) and slots.m.shape == (1,)
    assert int(new_state.count) == 2


def test_unfactored_momentum_golden_matches_t5x():
    params = {"x": jnp.ones((3, 2), jnp.float32)}
    grads = {"x": jnp.ones((3, 2), jnp.float32)}
    tx = adafactor(0.1, beta1=0.0, decay_rate=0.8, min_dim_size_to_factor=32)
    state = _state_at_step_one(tx, params, v=0.5 * np.ones((3, 2)), m=np.zeros((3, 2)))
    updates, new_state = tx.update(grads, state, params)
    slots = new_state.param_states["x"]
    np.testing.assert_allclose(optax.apply_updates(params, updates)["x"], 0.9, rtol=1e-6)
    np.testing.assert_allclose(slots.v, 0.787174 * np.ones((3, 2)), rtol=1e-6)
    np.testing.assert_allclose(slots.m, 0.1 * np.ones((3, 2)), rtol=1e-6)
    assert slots.v_row.shape == (1,) and slots.v_col.shape == (1,)


def test_global_norm_clipping_golden_matches_t5x():
    params = {"x": jnp.ones((3, 2), jnp.float32)}
    tx = adafactor(0.1, min_dim_size_to_factor=0, global_norm_clip_threshold=1.0)
    state = _state_at_step_one(tx, params, v_row=[0.9, 0.9], v_col=[0.1, 0.1, 0.1])
    _, new_state = tx.update({"x": jnp.ones((3, 2))}, state, params)
    np.testing.assert_allclose(new_state.param_states["x"].v_row, [0.478811] * 2, rtol=1e-6)
    np.testing.assert_allclose(new_state.param_states["x"].v_col, [0.13829] * 3, rtol=1e-5)


def test_slot_shapes_follow_t5x_layout():
    params = {
        "small": jnp.ones((24, 16)),
        "big": jnp.ones((256, 128)),
        "scale": jnp.ones((256,)),
        "scanned": jnp.ones((256, 3, 512)),
    }
    axes = {
        "small": ("embed", "mlp"),
        "big": ("mlp", "embed"),
        "scale": ("embed",),
        "scanned": ("embed", "layers", "mlp"),
    }
    state = adafactor(0.1, param_logical_axes=axes).init(params)
    shapes = {
        k: {s: getattr(v, s).shape for s in ("v_row", "v_col", "v", "m")}
        for k, v in state.param_states.items()
    }
    assert shapes["small"] == {"v_row": (1,), "v_col": (1,), "v": (24, 16), "m": (1,)}
    # rank-2 kernels use the size heuristic, like T5X: rows = smaller dim
    assert shapes["big"] == {"v_row": (128,), "v_col": (256,), "v": (1,), "m": (1,)}
    assert shapes["scale"] == {"v_row": (1,), "v_col": (1,), "v": (256,), "m": (1,)}
    # scanned: layers is a batch dim kept in both factors; v_row keeps rows (embed)
    assert shapes["scanned"] == {"v_row": (256, 3), "v_col": (3, 512), "v": (1,), "m": (1,)}


def test_factor_plan_without_axes_uses_two_largest_dims():
    plan = factor_plan((4, 300, 200), None)
    assert plan.row_reduced == (2,) and plan.col_reduced == (1,)
    assert not factor_plan((300, 100), None).factored


def test_factor_plan_rejects_half_factored_axes():
    with pytest.raises(ConfigError, match="mix factored and unfactored"):
        factor_plan((8, 8, 8), ("embed", "mlp", "relpos_buckets"))
    with pytest.raises(ConfigError, match="do not match parameter shape"):
        factor_plan((8, 8), ("embed",))


def test_scanned_layers_update_each_layer_independently():
    """A batch ('layers') dim must give the same result as updating each layer alone."""
    key = jax.random.PRNGKey(0)
    stacked = jax.random.normal(key, (130, 2, 140))
    grads = jax.random.normal(jax.random.PRNGKey(1), stacked.shape)
    tx_stacked = adafactor(0.01, param_logical_axes={"w": ("embed", "layers", "mlp")})
    upd, _ = tx_stacked.update({"w": grads}, tx_stacked.init({"w": stacked}), {"w": stacked})
    tx_single = adafactor(0.01)
    for layer in range(2):
        p, g = stacked[:, layer], grads[:, layer]
        single, _ = tx_single.update({"w": g}, tx_single.init({"w": p}), {"w": p})
        np.testing.assert_allclose(upd["w"][:, layer], single["w"], rtol=1e-5, atol=1e-7)


def test_adafactor_trains_under_jit_with_schedule():
    params = {"w": jnp.zeros((4,)), "b": jnp.zeros(())}
    x = jnp.arange(12.0).reshape(3, 4) / 10
    y = x @ jnp.array([1.0, -2.0, 0.5, 3.0]) + 1.0
    tx = adafactor(lambda step: 0.1 / jnp.sqrt(step + 1.0), multiply_by_parameter_scale=False)

    def loss(p):
        return jnp.mean((x @ p["w"] + p["b"] - y) ** 2)

    @jax.jit
    def step(p, s):
        updates, s = tx.update(jax.grad(loss)(p), s, p)
        return optax.apply_updates(p, updates), s

    state = tx.init(params)
    first = loss(params)
    for _ in range(30):
        params, state = step(params, state)
    assert loss(params) < 0.2 * first


def test_adamw_decays_kernels_not_norms():
    params = {
        "encoder": {
            "encoder_norm": {"scale": jnp.ones(4)},
            "mlp": {"wi": {"kernel": jnp.ones((4, 4)), "bias": jnp.ones(4)}},
        },
    }
    mask = decay_mask(params)
    assert mask["encoder"]["mlp"]["wi"]["kernel"] is True
    assert mask["encoder"]["mlp"]["wi"]["bias"] is False
    assert mask["encoder"]["encoder_norm"]["scale"] is False
    tx = adamw(0.1, weight_decay=0.5)
    zero_grads = jax.tree.map(jnp.zeros_like, params)
    updates, _ = tx.update(zero_grads, tx.init(params), params)
    np.testing.assert_allclose(updates["encoder"]["mlp"]["wi"]["kernel"], -0.05)
    np.testing.assert_allclose(updates["encoder"]["encoder_norm"]["scale"], 0.0)
    # a plain gradient step moves against the gradient by ~lr (Adam's normalised first step)
    updates, _ = tx.update(jax.tree.map(jnp.ones_like, params), tx.init(params), params)
    np.testing.assert_allclose(updates["encoder"]["encoder_norm"]["scale"], -0.1, rtol=1e-5)


def test_adamw_global_norm_clipping():
    tx = adamw(1.0, global_norm_clip_threshold=1.0)
    params = {"w": jnp.zeros(2)}
    updates, _ = tx.update({"w": jnp.array([300.0, 400.0])}, tx.init(params), params)
    np.testing.assert_allclose(updates["w"], [-1.0, -1.0], rtol=1e-5)


def test_create_optimizer_by_name():
    assert isinstance(create_optimizer("adafactor", 0.01).init({"w": jnp.ones(2)}), AdafactorState)
    with pytest.raises(ConfigError, match="unknown optimizer 'adam'.*adafactor"):
        create_optimizer("adam", 0.01)
