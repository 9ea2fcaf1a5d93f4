"""Feature converters: golden rows, the grain path matching the pure path, exact resume."""

import json

import grain
import numpy as np
import pytest

from t5forge.data import DecoderFeatureConverter, EncDecFeatureConverter, PrefixLMFeatureConverter
from t5forge.errors import ConfigError, DataError


def as_lists(rows):
    return [{name: values.tolist() for name, values in row.items()} for row in rows]


def test_encdec_packing_matches_seqio_golden():
    examples = [
        {"inputs": [7, 8, 5, 1], "targets": [3, 9, 1]},
        {"inputs": [8, 4, 9, 3, 1], "targets": [4, 1]},
    ]
    rows = EncDecFeatureConverter(pack=True).convert(examples, {"inputs": 10, "targets": 7})
    assert as_lists(rows) == [
        {
            "encoder_input_tokens": [7, 8, 5, 1, 8, 4, 9, 3, 1, 0],
            "encoder_segment_ids": [1, 1, 1, 1, 2, 2, 2, 2, 2, 0],
            "encoder_positions": [0, 1, 2, 3, 0, 1, 2, 3, 4, 0],
            "decoder_target_tokens": [3, 9, 1, 4, 1, 0, 0],
            "decoder_input_tokens": [0, 3, 9, 0, 4, 0, 0],
            "decoder_loss_weights": [1, 1, 1, 1, 1, 0, 0],
            "decoder_segment_ids": [1, 1, 1, 2, 2, 0, 0],
            "decoder_positions": [0, 1, 2, 0, 1, 0, 0],
        }
    ]
    assert all(values.dtype == np.int32 for values in rows[0].values())


def test_encdec_unpacked_trims_and_pads_without_segment_features():
    examples = [{"inputs": [5, 6, 7, 8, 9, 1], "targets": [3, 4, 5, 1], "extra": "ignored"}]
    rows = EncDecFeatureConverter(pack=False).convert(examples, {"inputs": 4, "targets": 6})
    assert as_lists(rows) == [
        {
            "encoder_input_tokens": [5, 6, 7, 8],
            "decoder_target_tokens": [3, 4, 5, 1, 0, 0],
            "decoder_input_tokens": [0, 3, 4, 5, 0, 0],
            "decoder_loss_weights": [1, 1, 1, 1, 0, 0],
        }
    ]


def test_packing_is_greedy_in_order_and_emits_when_any_feature_overflows():
    examples = [
        {"inputs": [1] * 3, "targets": [2] * 2},
        {"inputs": [3] * 3, "targets": [4] * 3},  # targets would overflow (2 + 3 > 4)
        {"inputs": [5] * 1, "targets": [6] * 1},  # fits beside the second
        {"inputs": [7] * 6, "targets": [8] * 1},  # inputs overflow: trimmed to 6, new row
    ]
    rows = EncDecFeatureConverter(pack=True).convert(examples, {"inputs": 6, "targets": 4})
    assert [row["encoder_segment_ids"].tolist() for row in rows] == [
        [1, 1, 1, 0, 0, 0],
        [1, 1, 1, 2, 0, 0],
        [1, 1, 1, 1, 1, 1],
    ]
    assert rows[1]["decoder_target_tokens"].tolist() == [4, 4, 4, 6]


def test_decoder_lm_packs_targets_only():
    examples = [{"targets": [3, 9, 1]}, {"targets": [4, 1]}]
    rows = DecoderFeatureConverter(pack=True).convert(examples, {"targets": 6})
    assert as_lists(rows) == [
        {
            "decoder_target_tokens": [3, 9, 1, 4, 1, 0],
            "decoder_input_tokens": [0, 3, 9, 0, 4, 0],
            "decoder_loss_weights": [1, 1, 1, 1, 1, 0],
            "decoder_segment_ids": [1, 1, 1, 2, 2, 0],
            "decoder_positions": [0, 1, 2, 0, 1, 0],
        }
    ]


def test_prefix_lm_unpacked_sees_the_whole_prefix():
    rows = PrefixLMFeatureConverter(pack=False).convert(
        [{"inputs": [9, 4, 6, 1], "targets": [3, 9, 1]}], {"inputs": 5, "targets": 4}
    )
    assert as_lists(rows) == [
        {
            "decoder_target_tokens": [9, 4, 6, 1, 3, 9, 1, 0, 0],
            "decoder_input_tokens": [0, 9, 4, 6, 1, 3, 9, 0, 0],
            "decoder_loss_weights": [0, 0, 0, 0, 1, 1, 1, 0, 0],
            "decoder_causal_attention": [1, 1, 1, 1, 1, 0, 0, 0, 0],
        }
    ]


def test_prefix_lm_packed_masks_each_segment():
    examples = [{"inputs": [9, 4, 6, 1], "targets": [3, 9, 1]}, {"inputs": [3, 2], "targets": [4]}]
    rows = PrefixLMFeatureConverter(pack=True).convert(examples, {"inputs": 6, "targets": 4})
    assert as_lists(rows) == [
        {
            "decoder_target_tokens": [9, 4, 6, 1, 3, 9, 1, 3, 2, 4],
            "decoder_input_tokens": [0, 9, 4, 6, 1, 3, 9, 0, 3, 2],
            "decoder_loss_weights": [0, 0, 0, 0, 1, 1, 1, 0, 0, 1],
            "decoder_causal_attention": [1, 1, 1, 1, 1, 0, 0, 1, 1, 1],
            "decoder_segment_ids": [1, 1, 1, 1, 1, 1, 1, 2, 2, 2],
            "decoder_positions": [0, 1, 2, 3, 4, 5, 6, 0, 1, 2],
        }
    ]


def test_padding_row_and_model_lengths():
    converter = PrefixLMFeatureConverter(pack=True)
    lengths = {"inputs": 3, "targets": 2}
    row = converter.padding_row(lengths)
    assert all(not values.any() for values in row.values())
    assert set(converter.model_feature_lengths(lengths).values()) == {5}


def random_examples(count, seed=0):
    rng = np.random.default_rng(seed)
    return [
        {
            "inputs": rng.integers(3, 50, rng.integers(1, 9)).tolist(),
            "targets": rng.integers(3, 50, rng.integers(1, 6)).tolist(),
        }
        for _ in range(count)
    ]


CONVERTERS = [
    EncDecFeatureConverter(pack=True),
    EncDecFeatureConverter(pack=False),
    DecoderFeatureConverter(pack=True),
    PrefixLMFeatureConverter(pack=True),
]


@pytest.mark.parametrize("converter", CONVERTERS, ids=repr)
def test_grain_path_matches_pure_path_and_resumes_exactly(converter):
    examples = random_examples(40)
    lengths = {"inputs": 12, "targets": 8}
    expected = as_lists(converter.convert(examples, lengths))
    dataset = converter.apply(grain.MapDataset.source(examples).to_iter_dataset(), lengths)
    assert as_lists(list(dataset)) == expected

    iterator = iter(dataset)
    head = [next(iterator) for _ in range(5)]
    state = json.loads(json.dumps(iterator.get_state()))
    resumed = iter(dataset)
    resumed.set_state(state)
    assert as_lists(head) + as_lists(list(resumed)) == expected


def test_missing_feature_and_missing_length_are_user_errors():
    with pytest.raises(DataError, match="needs the task feature 'inputs'"):
        EncDecFeatureConverter().convert([{"targets": [1]}], {"inputs": 4, "targets": 4})
    with pytest.raises(ConfigError, match=r"needs task_feature_lengths for \['inputs'\]"):
        EncDecFeatureConverter().convert([], {"targets": 4})
    with pytest.raises(DataError, match="1-D list of token ids"):
        DecoderFeatureConverter().convert([{"targets": ["a", "b"]}], {"targets": 4})
