"""A model loaded with int8 kernels (`weights_dtype='int8'`), or bfloat16 ones (stored transposed
on a CPU: models/transposed.py), decodes in the server's slots, with the kernels stacked as the
server stacks them, to the tokens of its own `generate`."""

import jax
import numpy as np
import pytest

import t5forge
from t5forge.models.layers import stack_projections
from t5forge.models.quantized import Int8Kernel
from t5forge.models.transposed import is_transposed, transposes_here
from t5forge.models.weights_dtype import is_int8
from t5forge.serving.slots import SlotDecoder
from t5forge.serving.stepwise import RowOptions


@pytest.mark.slow
@pytest.mark.parametrize("weights_dtype", ["int8", "bfloat16"])
def test_narrow_slots_decode_as_the_narrow_models_generate(tiny_hf_dir, weights_dtype):
    """Under the slots' vmap every row is multiplied on its own (a transposed kernel's lone row
    as two): the tokens are still generate()'s."""
    model = t5forge.load(tiny_hf_dir, weights_dtype=weights_dtype)
    params = stack_projections(model.params)  # what the serving engine multiplies by
    assert (
        is_int8(params) if weights_dtype == "int8" else is_transposed(params) == transposes_here()
    )
    rows = [[5, 9, 3, 12, 7, 1], [14, 3, 1]]
    slots = SlotDecoder(model.t5x_model, slots=2, cache_length=8, encoder_width=8)
    pool = slots.empty_pool(params)
    features, _ = model.predict_features(rows, 8, 2)
    pool = slots.admit(params, pool, features, [0, 1], [RowOptions(8), RowOptions(8)])
    live, made = np.ones(2, bool), [[], []]
    for _ in range(8):
        pool, tokens, _ = jax.device_get(slots.step(params, pool, live))
        for slot in np.flatnonzero(live):
            made[slot].append(int(tokens[slot]))
            live[slot] = tokens[slot] != model.t5x_model.eos_id
    expected = model.generate(rows, max_length=8)
    assert made == [list(row[: len(made[i])]) for i, row in enumerate(expected.tolist())]


def test_serve_loads_the_weights_dtype_and_activation_dtype_it_is_given(tiny_hf_dir, tiny_model):
    from t5forge.cli.serve import _parser
    from t5forge.errors import ConfigError
    from t5forge.serving.server import load_for_serving

    args = _parser().parse_args(
        ["--checkpoint", str(tiny_hf_dir), "--weights_dtype", "int8", "--dtype", "bfloat16"]
    )
    model = load_for_serving(args.checkpoint, weights_dtype=args.weights_dtype, dtype=args.dtype)
    assert model.config.dtype == "bfloat16"
    kernel = model.params["encoder"]["layers_0"]["mlp"]["wo"]["kernel"]
    assert isinstance(kernel, Int8Kernel)
    with pytest.raises(ConfigError, match="dtype= applies when loading; pass it to t5forge.load"):
        load_for_serving(tiny_model, dtype="bfloat16")
    with pytest.raises(ConfigError, match="Dense kernels are int8 .*; save from a model loaded"):
        model.save_hf(tiny_hf_dir / "not_written")
