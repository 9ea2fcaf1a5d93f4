"""Int8 inference (`weights_dtype='int8'`, models/quantized.py): quantisation error bounds, the
int8 product against the float one, and a tiny model decoding with int8 kernels."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from t5forge.api import Model
from t5forge.errors import ConfigError
from t5forge.models import native_products, quantized
from t5forge.models.layers import stack_projections
from t5forge.models.model import build_model
from t5forge.models.presets import get_config
from t5forge.models.products import dense_product
from t5forge.models.quantized import (
    Int8Kernel,
    dequantize_kernel,
    quantize_kernel,
    quantize_rows,
    xla_int8_matmul,
)
from t5forge.models.weights_dtype import is_int8, with_weights_dtype


def _normal(shape, seed=0, scale=1.0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32) * scale


@pytest.mark.parametrize("shape", [(37, 19), (37, 3, 19), (1, 5)])
def test_kernel_round_trip_is_within_half_a_step_per_output_channel(shape):
    kernel = _normal(shape)
    kernel[:, ..., 0] = 0.0  # an all-zero output channel
    quantized = quantize_kernel(kernel)
    assert quantized.values.dtype == jnp.int8 and quantized.shape == shape
    assert quantized.scale.shape == (1, *shape[1:])
    step = np.asarray(quantized.scale)
    largest = np.abs(kernel).max(axis=0, keepdims=True)
    np.testing.assert_allclose(step, np.where(largest == 0, 1.0, largest / 127), rtol=1e-6)
    error = np.abs(np.asarray(dequantize_kernel(quantized)) - kernel)
    assert (error <= step / 2 * (1 + 1e-6)).all()
    assert (np.asarray(dequantize_kernel(quantized))[:, ..., 0] == 0).all()


@pytest.mark.parametrize("bfloat16_cpu", [True, False], ids=["bf16-widened", "f32-widened"])
def test_int8_sums_on_xlas_path_are_the_exact_integer_sums(bfloat16_cpu, monkeypatch):
    """Widened to bfloat16 (CPUs with its instructions) or to float32 (the others): the same
    exact sums."""
    monkeypatch.setattr(quantized, "multiplies_bfloat16", lambda: bfloat16_cpu)
    x_q, x_scale = quantize_rows(jnp.asarray(_normal((13, 301), seed=1)))
    w = quantize_kernel(_normal((301, 29), seed=2))
    w_scale = w.scale.reshape(-1)
    exact = jax.lax.dot(x_q, w.values, preferred_element_type=jnp.int32)
    # A new function each time: make_jaxpr keeps the trace of one it has seen.
    program = jax.make_jaxpr(lambda *args: xla_int8_matmul(*args, jnp.float32))
    eqns = program(x_q, x_scale, w.values, w_scale).eqns
    (dot,) = [e for e in eqns if e.primitive.name == "dot_general"]
    wide = jnp.bfloat16 if bfloat16_cpu else jnp.float32
    assert [v.aval.dtype for v in dot.invars] == [wide, wide]
    np.testing.assert_allclose(
        xla_int8_matmul(x_q, x_scale, w.values, w_scale, jnp.float32),
        np.asarray(exact, np.float64) * np.asarray(x_scale)[:, None] * np.asarray(w_scale),
        rtol=1e-6,
    )


@pytest.mark.parametrize(
    "x_shape, kernel_shape",
    [((3, 5, 37), (37, 19)), ((1, 37), (37, 2, 11)), ((2, 1, 64), (64, 3, 7))],
    ids=["rows", "batch-1-stacked", "one-token-stacked"],
)
def test_int8_product_is_within_the_quantisation_bound_of_the_float_product(x_shape, kernel_shape):
    x, kernel = _normal(x_shape, seed=3), _normal(kernel_shape, seed=4, scale=0.1)
    quantized = quantize_kernel(kernel)
    result = np.asarray(dense_product(jnp.asarray(x), quantized, jnp.float32))
    exact = np.tensordot(x.astype(np.float64), kernel, axes=(-1, 0))
    # |x.w - x'.w'| <= sum|x| * w_step/2 + sum|w'| * x_step/2 per output, x' and w' the
    # dequantised operands (each off by at most half its step).
    x_step = np.abs(x).max(axis=-1) / 127
    w_step = np.asarray(quantized.scale)[0]
    rows_abs = np.abs(x).sum(axis=-1)
    columns_abs = np.abs(np.asarray(dequantize_kernel(quantized))).sum(axis=0)
    bound = (
        rows_abs[(...,) + (None,) * w_step.ndim] * w_step / 2
        + x_step[(...,) + (None,) * w_step.ndim] * columns_abs / 2
    )
    assert result.shape == exact.shape
    assert (np.abs(result - exact) <= bound * 1.001 + 1e-5).all()
    assert np.abs(result - exact).max() < 0.05 * np.abs(exact).max()


def test_int8_product_in_bfloat16_comes_out_in_bfloat16():
    quantized = quantize_kernel(_normal((16, 8)))
    result = dense_product(jnp.ones((2, 16), jnp.bfloat16), quantized, jnp.bfloat16)
    assert result.dtype == jnp.bfloat16


def _tiny(**overrides):
    config = get_config("t5_1_1/tiny", vocab_size=64, dtype="float32", **overrides)
    return config, jax.device_get(build_model(config).init_params(jax.random.PRNGKey(0)))


def test_int8_kernels_are_the_dense_kernels_only_and_the_router_stays_float32():
    config, params = _tiny(num_experts=2, num_sparse_encoder_layers=1)
    quantized = with_weights_dtype(params, "int8")
    leaves = jax.tree_util.tree_leaves_with_path(
        quantized, is_leaf=lambda leaf: isinstance(leaf, Int8Kernel)
    )
    kinds = {jax.tree_util.keystr(path): leaf for path, leaf in leaves}
    for path, leaf in kinds.items():
        # A fused group's stacked kernel ('key+value') is there when the kernels are packed.
        stacked = "+" in path.rsplit("[", 1)[-1]
        quantizable = (path.endswith("['kernel']") or stacked) and "router" not in path
        assert isinstance(leaf, Int8Kernel) == quantizable, path
        if not quantizable:
            assert leaf.dtype == np.float32, path
    expert = kinds["['encoder']['layers_1']['mlp']['expert']['wo']['kernel']"]
    assert expert.scale.shape == (2, 1, config.emb_dim)  # per expert and output channel
    assert is_int8(quantized) and not is_int8(params)
    again = with_weights_dtype(quantized, "int8")  # int8 again: unchanged
    for before, after in zip(jax.tree.leaves(quantized), jax.tree.leaves(again), strict=True):
        np.testing.assert_array_equal(before, after)
    with pytest.raises(ConfigError, match="already int8 and cannot become bfloat16 again; load"):
        with_weights_dtype(quantized, "bfloat16")


ROWS = [[5, 9, 3, 12, 7, 1], [14, 3, 1], [20, 21, 22, 23, 1]]


@pytest.mark.slow
@pytest.mark.parametrize(
    "overrides",
    [{}, {"num_heads": 4, "num_kv_heads": 2, "scan_layers": True}, {"num_experts": 2}],
    ids=["t5_1_1", "grouped-scanned", "experts"],
)
def test_int8_model_stays_near_float32_in_logits_and_greedy_tokens(overrides):
    if "num_experts" in overrides:
        overrides = {**overrides, "num_sparse_encoder_layers": 1, "num_sparse_decoder_layers": 1}
    config, params = _tiny(**overrides)
    exact, int8 = Model(config, params), Model(config, params)
    int8.set_weights_dtype("int8")
    inputs, targets = np.array([[3, 4, 5, 1], [6, 7, 1, 0]]), np.array([[0, 3, 4], [0, 5, 6]])
    exact_logits = np.asarray(exact.logits(inputs, targets))
    int8_logits = np.asarray(int8.logits(inputs, targets))
    assert np.abs(int8_logits - exact_logits).max() < 0.03 * np.abs(exact_logits).max()
    greedy = int8.generate(ROWS, max_length=8)
    assert (greedy == exact.generate(ROWS, max_length=8)).mean() >= 0.75
    # The kernels stacked ahead of time (what a server multiplies by) change no token.
    features, _ = int8.predict_features(ROWS, 8, 4)
    stacked = int8.t5x_model.predict_batch_with_aux(
        stack_projections(int8.params),
        features,
        jax.random.PRNGKey(0),
        method="greedy",
        max_decode_length=8,
    )[0]
    np.testing.assert_array_equal(np.asarray(stacked)[: len(ROWS)], greedy)


@pytest.mark.slow
def test_int8_beam_search_runs_and_keeps_its_best_beam_near_float32():
    config, params = _tiny()
    exact, int8 = Model(config, params), Model(config, params)
    int8.set_weights_dtype("int8")
    beams = int8.generate(ROWS, max_length=8, method="beam", num_beams=3)
    assert beams.shape == (len(ROWS), 8)
    assert (beams == exact.generate(ROWS, max_length=8, method="beam", num_beams=3)).mean() >= 0.75


def _unpacked_int8(params, monkeypatch):
    """`params` in int8 as a machine without the compiled product converts them: quantised and
    stacked, never packed (the product still runs compiled, on plain weights)."""
    with monkeypatch.context() as patch:
        patch.setattr(native_products, "int8_products_here", lambda: False)
        return stack_projections(with_weights_dtype(params, "int8"))


@pytest.mark.skipif(
    not native_products.int8_products_here(), reason="no compiled int8 product here to pack for"
)
@pytest.mark.parametrize(
    "overrides",
    [{"num_experts": 2, "num_sparse_decoder_layers": 1}, {"scan_layers": True}],
    ids=["layers-with-experts", "scanned"],
)
def test_packed_kernels_give_the_plain_kernels_numbers_exactly(overrides, amx_setting, monkeypatch):
    """Packing at load changes where the weights lie, not one number: the logits and greedy
    tokens of packed kernels (oneDNN's product, and the AMX kernel where the CPU has it) equal
    those of the same int8 kernels unpacked; the experts' stay unpacked (vmapped products).
    A packed kernel keeps no plain values (its shape only), so packing adds no copy."""
    config, params = _tiny(**overrides)
    model = Model(config, params)
    model.set_weights_dtype("int8")
    kernels = {
        jax.tree_util.keystr(path): leaf
        for path, leaf in jax.tree_util.tree_leaves_with_path(
            model.params, is_leaf=lambda leaf: isinstance(leaf, Int8Kernel)
        )
        if isinstance(leaf, Int8Kernel)
    }
    assert any("+" in path for path in kernels)  # fused groups stacked, then packed
    for path, kernel in kernels.items():
        assert (kernel.packed is None) == ("expert" in path), path
        if kernel.packed is not None:  # [1, bytes], or [1, layers, bytes] scanned
            layers = kernel.shape[1:2] if "['layers']" in path else ()
            assert kernel.packed.shape[:-1] == (1, *layers), path
            assert kernel.values.size == 0 and kernel.values.shape[:-1] == kernel.shape, path
    plain = _unpacked_int8(params, monkeypatch)
    plain_kernels = jax.tree.leaves(plain, is_leaf=lambda leaf: isinstance(leaf, Int8Kernel))
    assert all(k.packed is None for k in plain_kernels if isinstance(k, Int8Kernel))
    assert sum(leaf.nbytes for leaf in jax.tree.leaves(model.params)) < sum(
        leaf.nbytes for leaf in jax.tree.leaves(plain)
    ) + sum(leaf.packed.nbytes for leaf in kernels.values() if leaf.packed is not None)
    inputs, targets = np.array([[3, 4, 5, 1], [6, 7, 1, 0]]), np.array([[0, 3, 4], [0, 5, 6]])
    runs = {}
    for name, amx in (("packed, AMX kernel", True), ("packed, oneDNN", False)):
        native_products.amx_int8_products(amx)
        runs[name] = (model.logits(inputs, targets), model.generate(ROWS, max_length=8))
    model.params = plain
    runs["plain"] = (model.logits(inputs, targets), model.generate(ROWS, max_length=8))
    for name, (logits, tokens) in runs.items():
        np.testing.assert_array_equal(np.asarray(logits), np.asarray(runs["plain"][0]), name)
        np.testing.assert_array_equal(tokens, runs["plain"][1], name)
