"""How the network is computed: T5X's dtype policy and the rematerialization policies.

Read off the traced program itself: which dtype every matmul and exponential runs in, and which
residuals a remat policy keeps for the backward pass.
"""

import contextlib
import io

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.ad_checkpoint import print_saved_residuals

from t5forge.models.configs import REMAT_POLICIES
from t5forge.models.model import build_model
from t5forge.models.presets import get_config

VOCAB = 64


def _batch():
    rng = np.random.RandomState(0)
    targets = rng.randint(2, VOCAB, (2, 6)).astype(np.int32)
    targets[1, 4:] = 0
    return {
        "encoder_input_tokens": rng.randint(2, VOCAB, (2, 8)).astype(np.int32),
        "decoder_target_tokens": targets,
        "decoder_input_tokens": np.concatenate(
            [np.zeros((2, 1), np.int32), targets[:, :-1]], axis=1
        ),
    }


def _model(**overrides):
    # One layer per stack keeps each compile short; the policies act per layer.
    fields = dict(dtype="float32", vocab_size=VOCAB, num_encoder_layers=1, num_decoder_layers=1)
    return build_model(get_config("t5_1_1/tiny", **{**fields, **overrides}))


def _equations(jaxpr):
    """Every equation of a jaxpr, those of nested jaxprs (jit, remat, custom_vjp) included."""
    for eqn in jaxpr.eqns:
        yield eqn
        for value in eqn.params.values():
            for sub in value if isinstance(value, (list, tuple)) else (value,):
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    yield from _equations(inner)


def _dtypes_of(jaxpr, primitive):
    """(input dtypes..., output dtype) of each `primitive` equation."""
    return [
        tuple(v.aval.dtype.name for v in (*eqn.invars, *eqn.outvars))
        for eqn in _equations(jaxpr)
        if eqn.primitive.name == primitive
    ]


def test_bfloat16_policy_matmuls_in_bfloat16_softmax_logits_and_loss_in_float32():
    model = _model(dtype="bfloat16")
    params = model.abstract_params()  # tracing needs shapes and dtypes only
    batch = _batch()
    assert {x.dtype for x in jax.tree_util.tree_leaves(params)} == {jnp.dtype(jnp.float32)}

    forward = jax.make_jaxpr(lambda p: model.loss_fn(p, batch)[0])(params).jaxpr
    dots = _dtypes_of(forward, "dot_general")
    in_float32 = [d for d in dots if d[0] == "float32"]
    # Only the output projection to the vocabulary runs in float32 (as T5X's logits_dense).
    assert in_float32 == [("float32", "float32", "float32")]
    bf16 = [d for d in dots if d[0] == "bfloat16"]
    # Every bfloat16 product accumulates into float32 (XLA:CPU's fast form, products.py);
    # projections, MLP and contexts are cast back to bfloat16 after it.
    assert bf16 and all(d == ("bfloat16", "bfloat16", "float32") for d in bf16)
    exps = _dtypes_of(forward, "exp")
    assert exps and all(d == ("float32", "float32") for d in exps)  # softmaxes and the loss

    loss, grads = jax.eval_shape(jax.value_and_grad(lambda p: model.loss_fn(p, batch)[0]), params)
    assert loss.dtype == jnp.float32
    assert {g.dtype for g in jax.tree_util.tree_leaves(grads)} == {jnp.dtype(jnp.float32)}


def test_float32_policy_has_no_bfloat16_anywhere():
    model = _model()
    jaxpr = jax.make_jaxpr(lambda p: model.loss_fn(p, _batch())[0])(model.abstract_params()).jaxpr
    dtypes = {
        v.aval.dtype.name
        for eqn in _equations(jaxpr)
        for v in eqn.outvars
        if hasattr(v.aval, "dtype")
    }
    assert "bfloat16" not in dtypes


def test_bfloat16_kernels_multiply_in_bfloat16_into_float32_activations():
    """What t5forge.load(weights_dtype='bfloat16') gives the float32 policy: every weight
    matmul reads its kernel as stored and accumulates into float32."""
    model = _model()
    params = jax.tree_util.tree_map_with_path(
        lambda path, leaf: (
            jax.ShapeDtypeStruct(leaf.shape, jnp.bfloat16)
            if getattr(path[-1], "key", None) == "kernel"
            else leaf
        ),
        model.abstract_params(),
    )
    jaxpr = jax.make_jaxpr(lambda p: model.loss_fn(p, _batch())[0])(params).jaxpr
    dots = _dtypes_of(jaxpr, "dot_general")
    weight_dots = [d for d in dots if d[1] == "bfloat16"]
    # Encoder layer: q/k/v (one fused matmul), o, wi_0/wi_1 (fused), wo; decoder layer: those
    # and the cross-attention's q, k/v (fused) and o; then the logits.
    assert len(weight_dots) == 4 + 7 + 1 and all(
        d == ("bfloat16", "bfloat16", "float32") for d in weight_dots
    )
    # Attention between activations stays float32.
    assert {d for d in dots if d[1] != "bfloat16"} == {("float32", "float32", "float32")}


def _saved_residuals(model, params, batch) -> list[str]:
    """jax's own account of what the backward pass keeps, one line per residual."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        print_saved_residuals(lambda p: model.loss_fn(p, batch)[0], params)
    return printed.getvalue().splitlines()


@pytest.fixture(scope="module")
def without_remat():
    model = _model()
    params = model.init_params(jax.random.PRNGKey(1))
    batch = _batch()
    loss, grads = jax.jit(jax.value_and_grad(lambda p: model.loss_fn(p, batch)[0]))(params)
    return params, batch, loss, grads, len(_saved_residuals(model, params, batch))


@pytest.mark.parametrize("policy", [p for p in REMAT_POLICIES if p != "none"])
def test_remat_policy_keeps_loss_and_gradients(policy, without_remat):
    params, batch, loss, grads, residuals_without_remat = without_remat
    model = _model(remat_policy=policy)
    remat_loss, remat_grads = jax.jit(jax.value_and_grad(lambda p: model.loss_fn(p, batch)[0]))(
        params
    )
    np.testing.assert_allclose(remat_loss, loss, rtol=1e-6)
    for (path, got), want in zip(
        jax.tree_util.tree_leaves_with_path(remat_grads), jax.tree_util.tree_leaves(grads)
    ):
        np.testing.assert_allclose(
            got, want, atol=1e-6, rtol=1e-5, err_msg=jax.tree_util.keystr(path)
        )

    residuals = _saved_residuals(model, params, batch)
    assert len(residuals) < residuals_without_remat  # the policy really recomputes something
    named = {
        name
        for line in residuals
        for name in ("query_proj", "key_proj", "value_proj")
        if f"named '{name}'" in line
    }
    assert named == ({"query_proj", "key_proj", "value_proj"} if policy == "proj" else set())


def test_remat_policies_keep_less_the_more_they_recompute(without_remat):
    params, batch, *_ = without_remat
    kept = {
        policy: len(_saved_residuals(_model(remat_policy=policy), params, batch))
        for policy in ("full", "minimal", "dots_saveable")
    }
    # 'minimal' drops the attention matmuls (they have batch dims) that dots_saveable keeps.
    assert kept["full"] < kept["minimal"] < kept["dots_saveable"]
