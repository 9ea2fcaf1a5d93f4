"""products.py: the fast bfloat16 forms equal XLA's plain dot, forward and backward, and the
float32 path is the plain dot itself forward, with the same sums backward.

The reference for a bfloat16 product is the plain dot of the same bfloat16 operands computed
in float32; the fast form accumulates in float32 too, so the two differ by the final rounding
to bfloat16 (and the gradients by the cotangent's rounding): bfloat16 tolerances.
"""

import contextlib
import io

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.ad_checkpoint import print_saved_residuals

from t5forge.models import products
from t5forge.models.model import build_model
from t5forge.models.presets import get_config
from t5forge.models.products import bf16_weight_gradient, dense_product, einsum_product

# (x shape, kernel shape): odd sizes, batch 1, 3-D inputs, a stacked [in, n, out] kernel.
DENSE_SHAPES = [
    ((7, 13), (13, 5)),
    ((1, 1, 9), (9, 11)),
    ((3, 17, 33), (33, 65)),
    ((2, 5, 24), (24, 3, 7)),
]
# Every einsum attention.py and long_attention.py run, with its output dtype.
EINSUMS = [
    ("bhqd,bhkd->bhqk", (2, 3, 5, 8), (2, 3, 7, 8), jnp.float32),
    ("bhqk,bhkd->bqhd", (1, 3, 5, 7), (1, 3, 7, 8), jnp.bfloat16),
    # One jnp.einsum per gradient (float32 accumulation) failed to run here ("DotThunk"):
    ("bhqk,bhkd->bqhd", (4, 4, 11, 11), (4, 4, 11, 16), jnp.bfloat16),
    ("bqd,bkd->bqk", (6, 1, 8), (6, 9, 8), jnp.float32),
    ("bqk,bkd->bqd", (6, 3, 9), (6, 9, 8), jnp.float32),
    ("bhnqd,bhgd->bhnqg", (1, 2, 3, 4, 8), (1, 2, 5, 8), jnp.float32),
    ("bhnqg,bhgd->bnqhd", (1, 2, 3, 4, 5), (1, 2, 5, 8), jnp.bfloat16),
    ("btd,btg->bgd", (2, 11, 8), (2, 11, 3), jnp.bfloat16),
]


def _random(shape, dtype, seed):
    return jnp.asarray(np.random.default_rng(seed).standard_normal(shape), dtype)


def _plain_dense(x, kernel, dtype):
    """XLA's plain dot of x and kernel as rounded to bfloat16, in float32."""
    as_bf16 = lambda a: a.astype(jnp.bfloat16).astype(jnp.float32)  # noqa: E731
    dot = jax.lax.dot_general(as_bf16(x), as_bf16(kernel), (((x.ndim - 1,), (0,)), ((), ())))
    return dot.astype(dtype)


def _plain_einsum(spec, a, b, dtype):
    return jnp.einsum(spec, a.astype(jnp.float32), b.astype(jnp.float32)).astype(dtype)


def _weighted_sum(product, *args):
    """A scalar of the product with a non-uniform cotangent (a plain sum hides transposes)."""
    out = product(*args)
    weights = jnp.cos(jnp.arange(out.size, dtype=jnp.float32)).reshape(out.shape)
    return jnp.sum(out.astype(jnp.float32) * weights)


def _assert_close(got, want):
    """Equal within bfloat16's rounding: 2% of each value, or 1% of the largest (a sum of
    rounded terms is off by a fraction of its terms, not of itself)."""
    got, want = np.asarray(got, np.float32), np.asarray(want, np.float32)
    np.testing.assert_allclose(got, want, rtol=2e-2, atol=1e-2 * np.abs(want).max())


def _plain_f32(x, kernel):
    return jax.lax.dot_general(x, kernel, (((x.ndim - 1,), (0,)), ((), ())))


def _f32_gradients(product, x, kernel):
    return jax.jit(jax.grad(lambda *a: _weighted_sum(product, *a), (0, 1)))(x, kernel)


def _widens(kernel_shape) -> bool:
    return int(np.prod(kernel_shape[1:])) > kernel_shape[0]


@pytest.mark.parametrize("x_shape,kernel_shape", DENSE_SHAPES)
def test_float32_dense_product_is_the_plain_dot_and_its_gradients_the_same_sums(
    x_shape, kernel_shape
):
    """Forward bit for bit; a widening kernel's gradients (written out, the weight gradient
    from a transposed copy of x) equal JAX's within float32 rounding, a narrowing kernel's
    are JAX's own, bit for bit."""
    x, kernel = _random(x_shape, jnp.float32, 0), _random(kernel_shape, jnp.float32, 1)
    fast = lambda x, k: dense_product(x, k, jnp.float32)  # noqa: E731
    assert np.array_equal(jax.jit(fast)(x, kernel), jax.jit(_plain_f32)(x, kernel))
    jaxpr = str(jax.make_jaxpr(jax.grad(lambda *a: _weighted_sum(fast, *a)))(x, kernel))
    assert ("custom_vjp" in jaxpr) == _widens(kernel_shape)
    for got, want in zip(_f32_gradients(fast, x, kernel), _f32_gradients(_plain_f32, x, kernel)):
        assert got.dtype == jnp.float32 and got.shape == want.shape
        if _widens(kernel_shape):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
        else:
            assert np.array_equal(got, want)


def test_float32_weight_gradient_from_a_transposed_x_over_every_leading_axis():
    x, grad = _random((2, 9, 13), jnp.float32, 16), _random((2, 9, 3, 5), jnp.float32, 17)
    got = jax.jit(products.transposed_weight_gradient)(x, grad)
    want = jnp.einsum("bti,btno->ino", x, grad, precision="highest")
    assert got.dtype == jnp.float32 and got.shape == (13, 3, 5)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_the_switch_gives_float32_products_back_to_jax(monkeypatch):
    monkeypatch.setenv(products.FAST_PRODUCTS_SWITCH, "0")
    x, kernel = _random((3, 17, 33), jnp.float32, 0), _random((33, 65), jnp.float32, 1)
    fast = lambda x, k: dense_product(x, k, jnp.float32)  # noqa: E731
    jaxpr = str(jax.make_jaxpr(jax.grad(lambda *a: _weighted_sum(fast, *a)))(x, kernel))
    assert "custom_vjp" not in jaxpr
    for got, want in zip(_f32_gradients(fast, x, kernel), _f32_gradients(_plain_f32, x, kernel)):
        assert np.array_equal(got, want)


@pytest.mark.parametrize("spec,a_shape,b_shape,dtype", EINSUMS)
def test_float32_einsum_product_is_the_plain_einsum_bit_for_bit(spec, a_shape, b_shape, dtype):
    a, b = _random(a_shape, jnp.float32, 2), _random(b_shape, jnp.float32, 3)
    got = jax.jit(lambda a, b: einsum_product(spec, a, b, jnp.float32))(a, b)
    assert np.array_equal(got, jax.jit(lambda a, b: jnp.einsum(spec, a, b))(a, b))


@pytest.mark.parametrize("x_shape,kernel_shape", DENSE_SHAPES)
@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float32])
def test_bf16_dense_product_and_its_gradients_match_the_plain_dot(x_shape, kernel_shape, dtype):
    """bfloat16 activations with float32 master kernels (training), and bfloat16 kernels with
    float32 activations (`weights_dtype='bfloat16'` inference) with dtype float32."""
    x = _random(x_shape, jnp.bfloat16 if dtype == jnp.bfloat16 else jnp.float32, 4)
    kernel = _random(kernel_shape, jnp.float32 if dtype == jnp.bfloat16 else jnp.bfloat16, 5)
    fast = jax.jit(lambda x, k: dense_product(x, k, dtype))
    assert fast(x, kernel).dtype == dtype
    _assert_close(fast(x, kernel), _plain_dense(x, kernel, jnp.float32))
    for got, want in zip(
        jax.jit(jax.grad(lambda *a: _weighted_sum(fast, *a), (0, 1)))(x, kernel),
        jax.grad(lambda *a: _weighted_sum(lambda x, k: _plain_dense(x, k, dtype), *a), (0, 1))(
            x, kernel
        ),
    ):
        assert got.dtype == want.dtype
        _assert_close(got, want)


@pytest.mark.parametrize("spec,a_shape,b_shape,dtype", EINSUMS)
def test_bf16_einsum_product_and_its_gradients_match_the_plain_einsum(
    spec, a_shape, b_shape, dtype
):
    a, b = _random(a_shape, jnp.bfloat16, 6), _random(b_shape, jnp.bfloat16, 7)
    fast = jax.jit(lambda a, b: einsum_product(spec, a, b, dtype))
    assert fast(a, b).dtype == dtype
    _assert_close(fast(a, b), _plain_einsum(spec, a, b, jnp.float32))
    for got, want in zip(
        jax.jit(jax.grad(lambda *args: _weighted_sum(fast, *args), (0, 1)))(a, b),
        jax.grad(
            lambda *args: _weighted_sum(lambda a, b: _plain_einsum(spec, a, b, dtype), *args),
            (0, 1),
        )(a, b),
    ):
        assert got.dtype == jnp.bfloat16
        _assert_close(got, want)


def test_weight_gradient_is_x_transposed_times_grad_over_every_leading_axis():
    x, grad = _random((2, 9, 13), jnp.bfloat16, 8), _random((2, 9, 3, 5), jnp.bfloat16, 9)
    got = jax.jit(bf16_weight_gradient)(x, grad)
    want = jnp.einsum("bti,btno->ino", x.astype(jnp.float32), grad.astype(jnp.float32))
    assert got.dtype == jnp.float32 and got.shape == (13, 3, 5)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def _two_layers(product):
    """Two scanned layers of product(x, kernel) and tanh, each rematerialized keeping only
    the bfloat16 products' outputs (by their name: a custom_vjp hides its dot from the
    dots policies)."""

    def layer(x, kernel):
        return jnp.tanh(product(x, kernel).astype(jnp.float32)).astype(x.dtype), None

    policy = jax.checkpoint_policies.save_only_these_names(products.DENSE_PRODUCT)
    remat_layer = jax.checkpoint(layer, policy=policy)
    return lambda x, kernels: jax.lax.scan(remat_layer, x, kernels)[0]


def test_bf16_gradients_under_jit_scan_and_remat_match_the_plain_dot():
    x, kernels = _random((1, 7, 16), jnp.bfloat16, 10), _random((2, 16, 16), jnp.float32, 11)
    fast = _two_layers(lambda x, k: dense_product(x, k, jnp.bfloat16))
    plain = _two_layers(lambda x, k: _plain_dense(x, k, jnp.bfloat16))
    _assert_close(jax.jit(fast)(x, kernels), plain(x, kernels))
    for got, want in zip(
        jax.jit(jax.grad(lambda *a: _weighted_sum(fast, *a), (0, 1)))(x, kernels),
        jax.grad(lambda *a: _weighted_sum(plain, *a), (0, 1))(x, kernels),
    ):
        _assert_close(got, want)


def test_a_remat_policy_keeps_the_bf16_products_by_name():
    """What a dots policy needs to keep the bfloat16 products: their names (DENSE_PRODUCT,
    EINSUM_PRODUCT), since the custom_vjp hides the dot inside from it."""
    x, kernel = _random((3, 16), jnp.bfloat16, 12), _random((16, 8), jnp.float32, 13)
    a, b = _random((2, 3, 4), jnp.bfloat16, 14), _random((2, 5, 4), jnp.bfloat16, 15)

    def layer(x, kernel, a, b):
        y = jnp.tanh(dense_product(x, kernel, jnp.bfloat16).astype(jnp.float32))
        z = jnp.tanh(einsum_product("bqd,bkd->bqk", a, b, jnp.float32))
        return jnp.sum(y) + jnp.sum(z)

    policy = jax.checkpoint_policies.save_only_these_names(
        products.DENSE_PRODUCT, products.EINSUM_PRODUCT
    )
    saved = io.StringIO()
    with contextlib.redirect_stdout(saved):
        print_saved_residuals(jax.checkpoint(layer, policy=policy), x, kernel, a, b)
    for name in (products.DENSE_PRODUCT, products.EINSUM_PRODUCT):
        assert f"named '{name}'" in saved.getvalue()


def _bf16_training_losses(steps: int) -> list[float]:
    """A tiny T5 1.1's losses over `steps` Adam steps on one batch, activations in bfloat16
    and float32 master weights (T5X's default policy)."""
    model = build_model(
        get_config(
            "t5_1_1/tiny",
            dtype="bfloat16",
            vocab_size=64,
            num_encoder_layers=1,
            num_decoder_layers=1,
            dropout_rate=0.0,
        )
    )
    rng = np.random.RandomState(0)
    targets = rng.randint(2, 64, (4, 9)).astype(np.int32)
    batch = {
        "encoder_input_tokens": rng.randint(2, 64, (4, 11)).astype(np.int32),
        "decoder_target_tokens": targets,
        "decoder_input_tokens": np.concatenate(
            [np.zeros((4, 1), np.int32), targets[:, :-1]], axis=1
        ),
    }
    params = model.init_params(jax.random.PRNGKey(0))
    optimizer = optax.adam(3e-3)

    @jax.jit
    def step(params, state):
        loss, grads = jax.value_and_grad(lambda p: model.loss_fn(p, batch)[0])(params)
        updates, state = optimizer.update(grads, state, params)
        return optax.apply_updates(params, updates), state, loss

    state, losses = optimizer.init(params), []
    for _ in range(steps):
        params, state, loss = step(params, state)
        losses.append(float(loss))
    return losses


@pytest.mark.slow
def test_bf16_training_losses_stay_within_one_percent_of_the_plain_products(monkeypatch):
    fast = _bf16_training_losses(20)
    # The path before the fast forms: bfloat16 dots with bfloat16 results, differentiated by JAX.
    monkeypatch.setenv(products.FAST_PRODUCTS_SWITCH, "0")
    plain = _bf16_training_losses(20)
    assert fast[-1] < 0.9 * fast[0]  # it trains
    np.testing.assert_allclose(fast, plain, rtol=1e-2)


def test_a_remat_policy_keeps_a_widening_float32_product_by_name():
    """The float32 product with the written-out backward is a custom_vjp too: named, so the
    'minimal' and 'dots_saveable' policies keep it."""
    x, kernel = _random((3, 8), jnp.float32, 18), _random((8, 32), jnp.float32, 19)

    def layer(x, kernel):
        return jnp.sum(jnp.tanh(dense_product(x, kernel, jnp.float32)))

    policy = jax.checkpoint_policies.save_only_these_names(products.DENSE_PRODUCT)
    saved = io.StringIO()
    with contextlib.redirect_stdout(saved):
        print_saved_residuals(jax.checkpoint(layer, policy=policy), x, kernel)
    assert f"named '{products.DENSE_PRODUCT}'" in saved.getvalue()
