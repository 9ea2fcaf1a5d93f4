"""The per-row step decoder against the library's decoders, and the server's shape buckets."""

import jax
import numpy as np
import pytest

from t5forge.api import Model
from t5forge.data.buckets import Buckets
from t5forge.errors import DataError
from t5forge.models.model import build_model
from t5forge.models.presets import get_config
from t5forge.serving.engine import length_buckets
from t5forge.serving.stepwise import RowOptions, StepDecoder
from tests.models.test_gemma_switches import GEMMA, GEMMA_3

# T5Gemma and T5Gemma 2 (merged decoder attention: the slots' own part and the encoder's joined
# by their log-sum-exps) as tests/models/test_gemma_switches.py builds them.
T5GEMMA = {**GEMMA, "vocab_size": 64}
T5GEMMA_2 = {**T5GEMMA, **GEMMA_3}


@pytest.mark.parametrize(
    "preset, overrides, rows",
    [
        ("t5_1_1/tiny", {}, [[5, 9, 3, 12, 7, 1], [14, 3, 1]]),
        ("decoder_only/tiny", {}, [[5, 9, 3, 12, 7], [14, 3]]),
        ("t5_1_1/tiny", T5GEMMA, [[5, 9, 3, 12, 7, 1], [14, 3, 1]]),
        ("t5_1_1/tiny", T5GEMMA_2, [[5, 9, 3, 12, 7, 1], [14, 3, 1]]),
    ],
    ids=["t5_1_1", "decoder_only", "t5gemma", "t5gemma2"],
)
def test_greedy_rows_equal_the_library_decoder_and_sampled_rows_ignore_their_batch(
    preset, overrides, rows
):
    config = get_config(preset, **{"vocab_size": 64, "dtype": "float32", **overrides})
    model = Model(config, jax.device_get(build_model(config).init_params(jax.random.PRNGKey(0))))
    decoder = StepDecoder(model.t5x_model)
    features, prompt_width = model.predict_features(rows, 8, 4)
    cache_length = prompt_width + 12
    greedy = decoder.decode(model.params, features, cache_length, [RowOptions(10)] * 2)
    np.testing.assert_array_equal([r.tokens for r in greedy], model.generate(rows, max_length=10))
    expected = model.score(rows, [r.tokens for r in greedy])
    np.testing.assert_allclose([r.log_likelihood for r in greedy], expected, rtol=1e-4)

    sampled = RowOptions(10, temperature=1.0, seed=3)
    first = decoder.decode(
        model.params,
        features,
        cache_length,
        [sampled, RowOptions(10, temperature=0.7, top_k=5, seed=4)],
    )
    again = decoder.decode(
        model.params,
        features,
        cache_length,
        [sampled, RowOptions(4, temperature=1.0, top_p=0.9, seed=5)],
    )
    assert first[0].tokens == again[0].tokens
    assert len(again[1].tokens) <= 4
    streamed = []
    decoder.decode(
        model.params,
        features,
        cache_length,
        [sampled, RowOptions(3)],
        emit=lambda row, token: streamed.append((row, token)),
    )
    assert [t for row, t in streamed if row == 0] == first[0].tokens


def test_buckets_are_few_and_cover_the_limits():
    assert length_buckets(64).sizes() == (16, 64)
    assert length_buckets(512).sizes() == (16, 64, 256, 512)
    assert length_buckets(100).sizes() == (16, 64, 100)
    assert length_buckets(100).fit(65) == 100
    assert Buckets().sizes(1) == (1,)
    assert Buckets().sizes(24) == (1, 2, 4, 8, 16, 32)
    assert Buckets(smallest=8).fit(9) == 16
    with pytest.raises(DataError, match="over the largest bucket, 100"):
        length_buckets(100).fit(101)
