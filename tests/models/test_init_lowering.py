"""models/init_lowering.py: fresh params drawn with threefry as GPU kernel calls (a far smaller
init program on a GPU), the same values everywhere, and the setting left as it was found."""

import flax.linen as nn
import jax
import numpy as np
import pytest

from t5forge.models.init_lowering import compact_random_draws
from t5forge.models.model import build_model
from t5forge.models.presets import get_config

SETTING = "jax_threefry_gpu_kernel_lowering"


def test_the_setting_is_set_only_on_a_gpu_and_restored_after_an_error():
    before = getattr(jax.config, SETTING)
    with pytest.raises(RuntimeError), compact_random_draws():
        assert getattr(jax.config, SETTING) is (jax.default_backend() == "gpu" or before)
        raise RuntimeError("inside")
    assert getattr(jax.config, SETTING) == before


def test_init_params_equal_a_plain_jit_of_the_init():
    model = build_model(get_config("t5_1_1/tiny"))
    rng = jax.random.PRNGKey(7)
    plain = nn.meta.unbox(jax.jit(model._init_variables)(rng)["params"])
    drawn = model.init_params(rng)
    assert jax.tree.structure(plain) == jax.tree.structure(drawn)
    for a, b in zip(jax.tree.leaves(plain), jax.tree.leaves(drawn), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
