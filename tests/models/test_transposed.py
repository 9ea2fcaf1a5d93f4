"""bfloat16 kernels stored transposed for decoding (models/transposed.py): the product from
that layout against the plain one, scanned layers' slicing, the round trip back, and a model's
tokens with and without it."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from t5forge.api import Model
from t5forge.errors import ConfigError
from t5forge.models import transposed, weights_dtype
from t5forge.models.model import build_model
from t5forge.models.presets import get_config
from t5forge.models.products import dense_product
from t5forge.models.transposed import (
    TransposedKernel,
    is_transposed,
    transpose_kernels,
    transposed_product,
    untransposed,
)


def _bf16(shape, seed=0):
    values = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    return jnp.asarray(values, jnp.bfloat16)


def _plain_product(x, kernel, dtype):
    """The fast form's numbers from the [in, ...] layout: bfloat16 operands, float32 sums."""
    return jax.lax.dot_general(
        x.astype(jnp.bfloat16),
        kernel,
        (((x.ndim - 1,), (0,)), ((), ())),
        preferred_element_type=jnp.float32,
    ).astype(dtype)


@pytest.mark.parametrize(
    "x_shape, kernel_shape",
    [((8, 37), (37, 19)), ((1, 37), (37, 19)), ((2, 3, 64), (64, 3, 7)), ((1, 1, 16), (16, 2, 5))],
    ids=["rows", "one-row", "batch-stacked", "one-token-stacked"],
)
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
@pytest.mark.parametrize("pads", [True, False], ids=["lone-row-padded", "as-it-is"])
def test_the_transposed_product_is_the_plain_one(x_shape, kernel_shape, dtype, pads, monkeypatch):
    """Either way a lone row is multiplied (as two where the CPU has AMX, else as it is)."""
    monkeypatch.setattr(transposed, "_pads_lone_rows", lambda: pads)
    kernel = _bf16(kernel_shape, seed=1)
    x = _bf16(x_shape, seed=2).astype(jnp.float32)
    stored = transpose_kernels({"kernel": kernel})["kernel"]
    assert isinstance(stored, TransposedKernel) and stored.shape == kernel_shape
    result = dense_product(x, stored, dtype)
    assert result.shape == (*x_shape[:-1], *kernel_shape[1:]) and result.dtype == dtype
    tolerance = 1e-5 if dtype == jnp.float32 else 1e-2
    np.testing.assert_allclose(
        np.asarray(result, np.float32),
        np.asarray(_plain_product(x, kernel, dtype), np.float32),
        rtol=tolerance,
        atol=tolerance,
    )
    with pytest.raises(ConfigError, match=r"logical shape \(\d+, .*\) cannot multiply inputs of"):
        transposed_product(jnp.ones((2, kernel_shape[0] + 1)), stored, dtype)


@pytest.mark.parametrize("kernel_shape", [(16, 4, 5), (16, 4, 3, 5)], ids=["plain", "stacked"])
def test_a_scanned_kernel_slices_into_each_layers_transposed_kernel(kernel_shape):
    """Scan slices axis 1 of what it carries: a scanned kernel [in, layers, ...] is stored so
    that slice l is layer l's kernel stored on its own; and the round trip is exact."""
    kernel = _bf16(kernel_shape)
    params = {"layers": {"mlp": {"wo": {"kernel": kernel}}}, "other": {"kernel": kernel[:, 0]}}
    stored = transpose_kernels(params)
    scanned = stored["layers"]["mlp"]["wo"]["kernel"].values
    for layer in range(kernel_shape[1]):
        alone = transpose_kernels({"kernel": kernel[:, layer]})["kernel"].values
        np.testing.assert_array_equal(scanned[:, layer], alone)
    first = transpose_kernels({"kernel": kernel[:, 0]})["kernel"].values
    np.testing.assert_array_equal(stored["other"]["kernel"].values, first)  # not under 'layers'
    back = untransposed(stored)
    np.testing.assert_array_equal(back["layers"]["mlp"]["wo"]["kernel"], kernel)
    np.testing.assert_array_equal(back["other"]["kernel"], kernel[:, 0])


def _tiny(**overrides):
    config = get_config("t5_1_1/tiny", vocab_size=64, dtype="float32", **overrides)
    return config, jax.device_get(build_model(config).init_params(jax.random.PRNGKey(0)))


ROWS = [[5, 9, 3, 12, 7, 1], [14, 3, 1], [20, 21, 22, 23, 1]]


@pytest.mark.slow
@pytest.mark.parametrize(
    "overrides",
    [{}, {"scan_layers": True}, {"num_experts": 2, "num_sparse_decoder_layers": 1}],
    ids=["t5_1_1", "scanned", "experts"],
)
def test_transposed_kernels_give_the_plain_bfloat16_models_numbers(overrides, monkeypatch):
    """Where the kernels lie changes no token: a bfloat16-weights model's logits (to float32
    rounding of its sums) and greedy, single-row and beam tokens equal those of the same
    kernels left [in, out]; experts' and the router's kernels stay as they were."""
    if not transposed.transposes_here():
        pytest.skip("bfloat16 kernels are stored transposed on one CPU device only")
    config, params = _tiny(**overrides)
    model = Model(config, params)
    model.set_weights_dtype("bfloat16")
    assert is_transposed(model.params)
    kernels = jax.tree_util.tree_leaves_with_path(
        model.params, is_leaf=lambda leaf: isinstance(leaf, TransposedKernel)
    )
    for path, leaf in kernels:
        name = jax.tree_util.keystr(path)
        if name.endswith("['kernel']") or "+" in name:
            stays = "expert" in name or "router" in name
            assert isinstance(leaf, TransposedKernel) != stays, name
    with monkeypatch.context() as patch:
        patch.setattr(weights_dtype, "transposes_here", lambda: False)
        plain = weights_dtype.with_weights_dtype(params, "bfloat16")
    assert not is_transposed(plain)
    inputs, targets = np.array([[3, 4, 5, 1], [6, 7, 1, 0]]), np.array([[0, 3, 4], [0, 5, 6]])
    runs, stored = {}, model.params
    for name, tree in (("transposed", stored), ("plain", plain)):
        model.params = tree
        runs[name] = (
            np.asarray(model.logits(inputs, targets)),
            model.generate(ROWS, max_length=8),
            model.generate(ROWS[:1], max_length=8),
            model.generate(ROWS, max_length=8, method="beam", num_beams=2),
        )
    np.testing.assert_allclose(runs["transposed"][0], runs["plain"][0], rtol=1e-5, atol=1e-5)
    for got, want in zip(runs["transposed"][1:], runs["plain"][1:], strict=True):
        np.testing.assert_array_equal(got, want)
    # Converting again keeps them; another dtype is refused in one line.
    again = weights_dtype.with_weights_dtype(stored, "bfloat16")
    assert jax.tree.structure(again) == jax.tree.structure(stored)
    with pytest.raises(ConfigError, match="already bfloat16 and cannot become int8 again"):
        weights_dtype.with_weights_dtype(stored, "int8")
