"""Span corruption: T5's golden lengths and sentinels, and its statistics on real documents."""

import functools
import itertools

import numpy as np
import pytest
from denoising_checks import assert_resumes_exactly, restored_tokens

from t5forge.data import Feature, FunctionSource, Task
from t5forge.data import preprocessors as pp

EXTRA_IDS = 100


def test_random_spans_helper_golden():
    assert pp.random_spans_helper(512) == (568, 114)
    assert pp.random_spans_helper(1024) == (1137, 229)
    assert pp.random_spans_helper(64, 0.2, 2.0, 1, 1) == (70, 22)
    assert pp.random_spans_helper(64, 0.2, 1.0, 1, 1) == (63, 27)


def test_sentinels_count_down_from_the_top_id():
    mask = [True, True, False, False, True, False]
    tokens = list(range(10, 16))
    assert pp.noise_span_to_unique_sentinel(tokens, mask, 1000).tolist() == [999, 12, 13, 998, 15]
    assert pp.nonnoise_span_to_unique_sentinel(tokens, mask, 1000).tolist() == [
        10,
        11,
        999,
        14,
        998,
    ]


@pytest.mark.parametrize("length", [2, 10, 37, 568])
def test_noise_mask_shape_and_counts(length):
    rng = np.random.default_rng(length)
    mask = pp.random_spans_noise_mask(length, 0.15, rng, 3.0)
    num_noise = int(np.clip(np.round(length * 0.15), 1, length - 1))
    assert mask.shape == (length,) and mask.sum() == num_noise
    assert not mask[0]  # spans start with non-noise
    starts = np.sum(mask & ~np.concatenate([[False], mask[:-1]]))
    assert starts == min(max(1, round(num_noise / 3.0)), num_noise, length - num_noise)


def test_many_masks_at_once_match_the_single_mask_rules():
    rng = np.random.default_rng(0)
    masks = pp.random_spans_noise_mask(568, 0.15, rng, 3.0, num_rows=50)
    assert masks.shape == (50, 568)
    assert (masks.sum(axis=1) == 85).all() and not masks[:, 0].any()
    starts = masks & ~np.concatenate([np.zeros((50, 1), bool), masks[:, :-1]], axis=1)
    assert (starts.sum(axis=1) == 28).all()
    assert len({row.tobytes() for row in masks}) == 50


def test_span_lengths_are_uniform_over_all_segmentations():
    # length 10 at density 0.5: 5 noise tokens in 2 spans and 5 kept tokens in 2 runs; each
    # side splits 4 ways, so there are 16 masks and T5's segmentation makes them equally likely.
    masks = pp.random_spans_noise_mask(10, 0.5, np.random.default_rng(1), 3.0, num_rows=16000)
    _, counts = np.unique(masks, axis=0, return_counts=True)
    assert len(counts) == 16
    assert np.abs(counts - 1000).max() < 5 * np.sqrt(1000 * 15 / 16)


def test_sentinels_of_many_rows_match_row_by_row():
    rng = np.random.default_rng(2)
    tokens = rng.integers(3, 900, size=(6, 40))
    masks = pp.random_spans_noise_mask(40, 0.15, rng, 3.0, num_rows=6)
    for fn in (pp.noise_span_to_unique_sentinel, pp.nonnoise_span_to_unique_sentinel):
        rows = fn(tokens, masks, 1000)
        assert rows.tolist() == [fn(t, m, 1000).tolist() for t, m in zip(tokens, masks)]


_DOCUMENTS: list[str] = []


def _documents(split):
    return [{"text": text} for text in _DOCUMENTS]


@pytest.fixture(scope="module")
def span_task(english_documents, english_vocab):
    _DOCUMENTS[:] = english_documents
    feature = Feature(english_vocab)
    return Task(
        "test_english_span_corruption",
        FunctionSource(_documents, ["train"]),
        [
            functools.partial(pp.rekey, key_map={"inputs": None, "targets": "text"}),
            pp.tokenize,
            pp.CacheDatasetPlaceholder(),
            pp.span_corruption,
            pp.append_eos_after_trim,
        ],
        {"inputs": feature, "targets": feature},
    )


def _sentinels(ids, first_sentinel):
    return [int(i) for i in ids if i >= first_sentinel]


def test_statistics_on_real_documents(span_task, english_vocab):
    lengths = {"inputs": 512, "targets": 114}
    examples = list(span_task.get_dataset("train", sequence_length=lengths, shuffle=False))
    assert len(examples) > 1000
    first_sentinel = english_vocab.vocab_size - EXTRA_IDS
    noise = raw = spans = 0
    for example in examples:
        inputs, targets = example["inputs"], example["targets"]
        assert len(inputs) <= 512 and len(targets) <= 114
        assert inputs[-1] == 1 and targets[-1] == 1
        input_sentinels = _sentinels(inputs, first_sentinel)
        target_sentinels = _sentinels(targets, first_sentinel)
        assert set(target_sentinels) <= set(input_sentinels)
        assert input_sentinels == list(
            range(
                english_vocab.vocab_size - 1,
                english_vocab.vocab_size - 1 - len(input_sentinels),
                -1,
            )
        )
        example_noise = len(targets) - 1 - len(target_sentinels)
        noise += example_noise
        raw += len(inputs) - 1 - len(input_sentinels) + example_noise
        spans += len(input_sentinels)
    assert abs(noise / raw - 0.15) <= 0.01
    assert abs(noise / spans - 3.0) <= 0.15
    full = [e for e in examples if len(e["inputs"]) == 512]
    assert len(full) > 0.9 * len(examples)
    assert max(len(e["targets"]) for e in examples) == 114


def test_corrupted_text_reassembles_the_documents_in_order(
    span_task, english_vocab, english_documents
):
    lengths = {"inputs": 128, "targets": 64}
    raw_length = pp.random_spans_helper(128)[0]
    examples = itertools.islice(
        span_task.get_dataset("train", sequence_length=lengths, shuffle=False), 40
    )
    first_sentinel = english_vocab.vocab_size - EXTRA_IDS
    restored = [restored_tokens(e, first_sentinel) for e in examples]
    assert all(len(r) == raw_length for r in restored)
    stream = [i for text in english_documents[:40] for i in english_vocab.encode(text)]
    assert sum(restored, []) == stream[: 40 * raw_length]


@pytest.mark.parametrize("documents_per_merge", [128, 2])
def test_resume_is_exact_anywhere(span_task, documents_per_merge):
    lengths = {"inputs": 128, "targets": 64}
    steps = list(span_task.preprocessors)
    steps[3] = pp.span_corruption.bind(documents_per_merge=documents_per_merge)
    task = Task(
        f"{span_task.name}_{documents_per_merge}",
        span_task.source,
        steps,
        span_task.output_features,
    )
    assert_resumes_exactly(task, lengths, seed=3, count=30, starts=(0, 1, 7, 13, 25))


def test_random_roll_moves_noise_anywhere_and_keeps_its_count():
    rng = np.random.default_rng(3)
    masks = pp.random_spans_noise_mask(50, 0.2, rng, 3.0, num_rows=4000, random_roll=True)
    assert (masks.sum(axis=1) == 10).all()
    # Unrolled masks never start with noise; rolled ones do as often as any position is noise.
    assert abs(masks[:, 0].mean() - 0.2) < 0.03
    assert np.abs(masks.mean(axis=0) - 0.2).max() < 0.04


def test_unbiased_span_count_averages_to_the_mean_span_length():
    rng = np.random.default_rng(4)
    # 90 noise tokens at mean 64: T5 always makes one span; the unbiased count 1 or 2.
    t5 = pp.random_spans_noise_mask(600, 0.15, rng, 64.0, num_rows=50)
    assert (_span_starts(t5) == 1).all()
    masks = pp.random_spans_noise_mask(
        600, 0.15, rng, 64.0, num_rows=4000, unbiased_span_count=True
    )
    spans = _span_starts(masks)
    assert set(spans.tolist()) == {1, 2} and (masks.sum(axis=1) == 90).all()
    assert abs(90 / spans.mean() / 64 - 1) < 0.02


def _span_starts(masks):
    previous = np.concatenate([np.zeros((len(masks), 1), bool), masks[:, :-1]], axis=1)
    return (masks & ~previous).sum(axis=1)


def test_no_noise_at_density_zero_as_in_t5():
    assert not pp.random_spans_noise_mask(20, 0.0, np.random.default_rng(0)).any()


def test_reserved_for_packing_shortens_the_inputs(span_task):
    steps = list(span_task.preprocessors)
    steps[3] = pp.span_corruption.bind(reserved_for_packing=12)
    task = Task("reserved", span_task.source, steps, span_task.output_features)
    lengths = {"inputs": 128, "targets": 64}
    examples = list(itertools.islice(task.get_dataset("train", sequence_length=lengths), 50))
    assert max(len(e["inputs"]) for e in examples) == 116
