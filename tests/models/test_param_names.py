"""Parameter names (T5X's slash form) and the shape comparison every loader reports with."""

import jax
import numpy as np
import optax

from t5forge.models import param_names

PARAMS = {
    "encoder": {"layers_0": {"mlp": {"wi": {"kernel": np.zeros((4, 8))}}}},
    "token_embedder": {"embedding": np.zeros((10, 4))},
}


def test_names_are_t5x_paths_for_dicts_attributes_and_indices():
    assert list(param_names.named_leaves(PARAMS)) == [
        "encoder/layers_0/mlp/wi/kernel",
        "token_embedder/embedding",
    ]
    state = optax.adam(0.1).init({"w": np.zeros(2)})  # a tuple of named tuples
    names = list(param_names.named_leaves(state))
    assert names == ["0/count", "0/mu/w", "0/nu/w"]


def test_unflatten_like_puts_each_named_leaf_back_in_place():
    named = {name: np.ones(1) * i for i, name in enumerate(param_names.named_leaves(PARAMS))}
    rebuilt = param_names.unflatten_like(PARAMS, named)
    assert rebuilt["token_embedder"]["embedding"][0] == 1
    assert jax.tree.structure(rebuilt) == jax.tree.structure(PARAMS)


def test_shape_mismatch_names_the_first_difference():
    expected = param_names.shapes(PARAMS)
    assert param_names.shape_mismatch(expected, dict(expected)) is None
    assert (
        param_names.shape_mismatch(expected, {**expected, "token_embedder/embedding": (11, 4)})
        == "has 'token_embedder/embedding' with shape (11, 4) but the model expects (10, 4)"
    )
    missing = {k: v for k, v in expected.items() if k != "token_embedder/embedding"}
    assert param_names.shape_mismatch(expected, missing) == (
        "has no parameter 'token_embedder/embedding' (the model expects shape (10, 4))"
    )
    extra = {**expected, "decoder/x": (1,), "decoder/y": (1,)}
    assert param_names.shape_mismatch(expected, extra) == (
        "has 'decoder/x', which this model does not use (2 unexpected parameter(s) in all)"
    )
    assert param_names.shape_mismatch(expected, extra, allow_extra=True) is None
