"""T5's token-stream steps: select_random_chunk, reduce_concat_tokens, split_tokens."""

import numpy as np
import pytest

from t5forge.data import Feature, FunctionSource, Task
from t5forge.data import preprocessors as pp
from t5forge.errors import DataError


def _documents(split):
    return [
        {"targets": np.arange(1, n + 1, dtype=np.int32) + 1000 * k, "id": k}
        for k, n in enumerate([5, 0, 12, 3, 9, 30])
    ]


def _run(*steps, lengths=None, vocabulary=None):
    feature = Feature(vocabulary, required=False)
    task = Task(
        "token_streams",
        FunctionSource(_documents, ["train"]),
        list(steps),
        {"targets": feature},
    )
    return list(task.get_dataset("train", sequence_length=lengths, shuffle=False))


@pytest.fixture(scope="module")
def vocabulary(spm_vocabulary):
    return spm_vocabulary


def test_select_random_chunk_keeps_one_aligned_window(vocabulary):
    out = _run(pp.select_random_chunk.bind(max_length=4), vocabulary=vocabulary)
    assert len(out) == 5  # the empty document is dropped
    for example in out:
        tokens = example["targets"]
        assert 1 <= len(tokens) <= 4 and set(example) == {"targets"}
        start = int(tokens[0] % 1000) - 1
        assert start % 4 == 0 and np.array_equal(np.diff(tokens), np.ones(len(tokens) - 1))


def test_select_random_chunk_passes_keys_through_and_reads_the_sequence_length(vocabulary):
    step = pp.select_random_chunk.bind(passthrough_feature_keys=["id"])
    out = _run(step, lengths={"targets": 6}, vocabulary=vocabulary)
    assert [e["id"] for e in out] == [0, 2, 3, 4, 5]
    assert max(len(e["targets"]) for e in out) == 5  # one left for EOS


def test_reduce_concat_tokens_joins_runs_of_documents(vocabulary):
    out = _run(pp.reduce_concat_tokens.bind(batch_size=4), vocabulary=vocabulary)
    assert [len(e["targets"]) for e in out] == [5 + 12 + 3, 9 + 30]
    docs = _documents("train")
    assert out[0]["targets"].tolist() == [t for d in docs[:4] for t in d["targets"].tolist()]


def test_split_tokens_cuts_fixed_and_log_uniform_segments(vocabulary):
    out = _run(pp.split_tokens.bind(max_tokens_per_segment=4), vocabulary=vocabulary)
    assert [len(e["targets"]) for e in out] == [4, 1, 4, 4, 4, 3, 4, 4, 1] + [4] * 7 + [2]
    random = _run(
        pp.split_tokens.bind(min_tokens_per_segment=2, max_tokens_per_segment=10),
        vocabulary=vocabulary,
    )
    assert sum(len(e["targets"]) for e in random) == 5 + 12 + 3 + 9 + 30
    assert max(len(e["targets"]) for e in random) < 10


def test_split_tokens_to_inputs_length_leaves_room_for_eos(vocabulary):
    out = _run(pp.split_tokens_to_targets_length, lengths={"targets": 5}, vocabulary=vocabulary)
    assert max(len(e["targets"]) for e in out) == 4


def test_cut_keys_cannot_pass_through(vocabulary):
    step = pp.split_tokens.bind(max_tokens_per_segment=4, passthrough_feature_keys=["targets"])
    with pytest.raises(DataError, match="both cut and passed through"):
        _run(step, vocabulary=vocabulary)
