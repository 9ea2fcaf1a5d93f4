"""Span corruption: T5's golden lengths and sentinels, and its statistics on real documents."""

import functools
import gzip
import io
import itertools
import json

import numpy as np
import pytest
import sentencepiece

from t5forge.data import preprocessors as pp
from t5forge.data.sources import FunctionSource
from t5forge.data.tasks import Feature, Task
from t5forge.data.vocabularies import SentencePieceVocabulary

NUM_DOCUMENTS = 2000
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


@pytest.fixture(scope="module")
def english_documents(shared_data):
    with gzip.open(shared_data / "english_corpus" / "train.jsonl.gz", "rt") as f:
        return [json.loads(line)["text"] for line in itertools.islice(f, NUM_DOCUMENTS)]


@pytest.fixture(scope="module")
def english_vocab(english_documents, tmp_path_factory):
    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(english_documents[:400]),
        model_writer=model,
        vocab_size=2000,
        pad_id=0,
        eos_id=1,
        unk_id=2,
        bos_id=-1,
        num_threads=2,
        minloglevel=2,
        max_sentence_length=20000,
    )
    path = tmp_path_factory.mktemp("vocab") / "english.model"
    path.write_bytes(model.getvalue())
    return SentencePieceVocabulary(path, extra_ids=EXTRA_IDS)


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


def test_corrupted_text_reassembles_the_original(span_task, english_vocab):
    example = next(
        iter(span_task.get_dataset("train", sequence_length={"inputs": 128, "targets": 64}))
    )
    inputs, targets = example["inputs"][:-1].tolist(), example["targets"][:-1].tolist()
    first_sentinel = english_vocab.vocab_size - EXTRA_IDS

    def runs(ids):
        out, current = {}, None
        for i in ids:
            if i >= first_sentinel:
                current = i
                out[current] = []
            elif current is not None:
                out[current].append(i)
        return out

    fill = runs(targets)
    restored = []
    for i in inputs:
        restored.extend(fill[i] if i >= first_sentinel else [i])
    assert len(restored) == pp.random_spans_helper(128)[0]
    assert all(i < first_sentinel for i in restored)


def test_resume_mid_merge_group_is_exact(span_task):
    lengths = {"inputs": 128, "targets": 64}
    iterator = iter(span_task.get_dataset("train", sequence_length=lengths, seed=3))
    for _ in range(7):
        next(iterator)
    state = iterator.get_state()
    expected = [next(iterator) for _ in range(5)]
    resumed = iter(span_task.get_dataset("train", sequence_length=lengths, seed=3))
    resumed.set_state(state)
    for want, got in zip(expected, (next(resumed) for _ in range(5))):
        assert np.array_equal(want["inputs"], got["inputs"])
        assert np.array_equal(want["targets"], got["targets"])
