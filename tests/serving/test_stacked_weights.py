"""Kernels stacked once at load (layers.stack_projections, the server's weights) give the
same scores and tokens as the weights as trained, for T5 1.1, grouped-query attention (keys
and values narrower than queries: concatenated, not stacked) and scanned layers."""

import jax
import numpy as np
import pytest

from t5forge.api import Model
from t5forge.models.layers import stack_projections, stacked_name
from t5forge.models.model import build_model
from t5forge.models.presets import get_config

GROUPED = {"num_heads": 4, "num_kv_heads": 2}


@pytest.mark.slow
@pytest.mark.parametrize(
    "overrides", [{}, GROUPED, {"scan_layers": True}], ids=["t5_1_1", "grouped", "scanned"]
)
def test_stacked_kernels_change_no_score_and_no_token(overrides):
    config = get_config("t5_1_1/tiny", vocab_size=64, dtype="float32", **overrides)
    params = jax.device_get(build_model(config).init_params(jax.random.PRNGKey(0)))
    stacked = stack_projections(params)
    names = {jax.tree_util.keystr(path) for path, _ in jax.tree_util.tree_leaves_with_path(stacked)}
    assert any(stacked_name(("wi_0", "wi_1")) in name for name in names)
    assert any(stacked_name(("query", "key", "value")) in name for name in names)

    model = Model(config, params)
    rows, targets = [[5, 9, 3, 12, 7, 1], [14, 3, 1]], [[4, 8, 1], [9, 1]]
    features = model.score_features(rows, targets, {"inputs": 8, "targets": 4}, 2)
    np.testing.assert_allclose(
        model.t5x_model.score_batch(stacked, features),
        model.t5x_model.score_batch(params, features),
        rtol=1e-5,
    )
    inputs, _ = model.predict_features(rows, 8, 2)
    rng = jax.random.PRNGKey(0)
    decoded = [
        model.t5x_model.predict_batch_with_aux(
            weights, inputs, rng, method="greedy", max_decode_length=6
        )[0]
        for weights in (params, stacked)
    ]
    np.testing.assert_array_equal(*decoded)
