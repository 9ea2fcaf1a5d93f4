"""Preprocessors: the text recipes, user functions, drops, and the errors users see."""

import functools

import grain
import numpy as np
import pytest

from t5forge.data import ByteVocabulary, Feature, FunctionSource, SentencePieceVocabulary, Task
from t5forge.data import preprocessors as pp
from t5forge.data.grain_ops.regroup import RegroupIterDataset
from t5forge.errors import DataError


@pytest.fixture(scope="module")
def vocab(test_spm_path):
    return SentencePieceVocabulary(test_spm_path, extra_ids=10)


@pytest.fixture(scope="module")
def features(vocab):
    return {"inputs": Feature(vocab), "targets": Feature(vocab)}


def _rows(split):
    texts = ["this is a test", "", "a test", "is this", "the cat sat"]
    return [{"question": t, "answer": f"{t} ok", "id": i} for i, t in enumerate(texts)]


def _make_task(name, steps, features):
    return Task(name, FunctionSource(_rows, ["train"]), steps, features)


def test_rekey_and_missing_field():
    assert pp.rekey({"a": 1, "b": 2}, key_map={"inputs": "b", "targets": None}) == {
        "inputs": 2,
        "targets": "",
    }
    with pytest.raises(DataError, match=r"no field 'c' \(fields: a, b\)"):
        pp.rekey({"a": 1, "b": 2}, key_map={"inputs": "c"})


def test_tokenize_keeps_pretokenized_text(features):
    out = pp.tokenize(
        {"inputs": "this is a test", "targets": "a test", "id": 3}, output_features=features
    )
    assert out["inputs"].tolist() == [11, 8, 6, 3, 8, 6, 3, 5, 10]
    assert out["inputs_pretokenized"] == "this is a test" and out["id"] == 3
    with_eos = pp.tokenize({"targets": "a test"}, output_features=features, with_eos=True)
    assert with_eos["targets"].tolist() == [3, 5, 10, 1]


@pytest.mark.parametrize("vocabulary", ["sentencepiece", "byte"])
def test_batched_tokenize_equals_per_example_tokenize(vocabulary, vocab):
    chosen = vocab if vocabulary == "sentencepiece" else ByteVocabulary(extra_ids=10)
    features = {"inputs": Feature(chosen), "targets": Feature(chosen)}
    examples = [
        {"inputs": "this is a test", "targets": "a test", "id": 0},
        {"inputs": "", "targets": "<extra_id_0> <extra_id_1> v <extra_id_9>", "id": 1},
        {"inputs": "the cat sat", "id": 2},  # no targets: left alone
        {"inputs": "é is a test " * 50, "targets": "", "id": 3},
    ]
    batched = pp.tokenize(examples, output_features=features, with_eos=True)
    one_by_one = [pp.tokenize(e, output_features=features, with_eos=True) for e in examples]
    assert [sorted(b) for b in batched] == [sorted(o) for o in one_by_one]
    for example, out in zip(examples, batched):
        for name in ("inputs", "targets"):
            if name not in example:
                assert name not in out
                continue
            assert out[name].dtype == np.int32 and out[name].flags.writeable
            assert out[name].tolist() == chosen.encode(example[name]) + [1]
            assert out[f"{name}_pretokenized"] == example[name]
    if vocabulary == "sentencepiece":
        assert batched[1]["targets"].tolist() == [35, 34, 3, 25, 26, 1]


def test_grouped_reads_tokenize_like_single_reads(features, vocab):
    # A regroup over a random-access pipeline reads each group in one batched tokenize call;
    # it must see the tokens that one-at-a-time reads give.
    def keep_group(group, rng):
        return [{"targets": np.concatenate([e["targets"] for e in group])}]

    steps = [pp.rekey.bind(key_map={"inputs": "question", "targets": "answer"}), pp.tokenize]
    task = _make_task("test_grouped_tokenize", steps, features)
    ds = task.get_dataset("train", shuffle=False)
    texts = [row["answer"] for row in _rows("train")]
    assert [e["targets"].tolist() for e in ds] == [vocab.encode(t) for t in texts]
    context = pp.PipelineContext("test_grouped", features, None, 0, task.dropped_example_counts)
    tokenized = grain.MapDataset.source(_rows("train")).map(
        lambda row: {"inputs": row["question"], "targets": row["answer"]}
    )
    tokenized = pp.tokenize.apply(tokenized, context, seed=0)
    grouped = list(RegroupIterDataset(tokenized, keep_group, group_size=3, seed=0))
    assert [g["targets"].tolist() for g in grouped] == [
        sum((vocab.encode(t) for t in texts[:3]), []),
        sum((vocab.encode(t) for t in texts[3:]), []),
    ]


def test_append_eos_and_append_eos_after_trim(features, vocab):
    example = {"inputs": np.arange(3, 10), "targets": np.arange(3, 6)}
    assert pp.append_eos(example, output_features=features)["inputs"].tolist() == [
        3,
        4,
        5,
        6,
        7,
        8,
        9,
        1,
    ]
    trimmed = pp.append_eos_after_trim(
        example, output_features=features, sequence_length={"inputs": 4, "targets": 10}
    )
    assert trimmed["inputs"].tolist() == [3, 4, 5, 1]
    assert trimmed["targets"].tolist() == [3, 4, 5, 1]
    no_eos = {"inputs": Feature(vocab, add_eos=False)}
    assert pp.append_eos_after_trim(example, output_features=no_eos)["inputs"].tolist() == list(
        range(3, 10)
    )


def test_text_recipes():
    assert pp.translate(
        {"en": "Hello", "de": "Hallo"}, source_language="en", target_language="de"
    ) == {"inputs": "translate English to German: Hello", "targets": "Hallo"}
    assert pp.summarize({"d": "long text", "s": "short"}, article_key="d", summary_key="s") == {
        "inputs": "summarize: long text",
        "targets": "short",
    }
    assert pp.classify(
        {"text": "great", "label": "fresh"}, text_key="text", label_key="label", prefix="sentiment"
    ) == {"inputs": "sentiment: great", "targets": "fresh"}


def test_truncate_head_and_tail_keeps_both_ends(features):
    example = {"inputs": np.arange(100)}
    out = pp.truncate_head_and_tail(
        example, sequence_length={"inputs": 11}, output_features=features, tail_tokens=4
    )
    assert out["inputs"].tolist() == [0, 1, 2, 3, 4, 5, 96, 97, 98, 99]
    short = pp.truncate_head_and_tail(
        {"inputs": np.arange(5)}, sequence_length={"inputs": 11}, output_features=features
    )
    assert short["inputs"].tolist() == list(range(5))


@pytest.mark.parametrize(
    "length, head_tokens, kept",
    [
        (11, None, [0, 1, 2, 3, 4, 95, 96, 97, 98, 99]),  # even budget: halves
        (10, None, [0, 1, 2, 3, 4, 96, 97, 98, 99]),  # odd budget: the head takes the extra token
        (11, 3, [0, 1, 2, 93, 94, 95, 96, 97, 98, 99]),
        (11, 50, list(range(10))),  # capped at the budget
    ],
)
def test_truncate_head_and_tail_splits_the_budget(features, length, head_tokens, kept):
    out = pp.truncate_head_and_tail(
        {"inputs": np.arange(100)},
        sequence_length={"inputs": length},
        output_features=features,
        head_tokens=head_tokens,
    )
    assert out["inputs"].tolist() == kept


def test_truncate_head_and_tail_refuses_both_shares(features):
    with pytest.raises(DataError, match="head_tokens or tail_tokens, not both"):
        pp.truncate_head_and_tail(
            {"inputs": np.arange(100)},
            sequence_length={"inputs": 11},
            output_features=features,
            head_tokens=3,
            tail_tokens=4,
        )


def _add_noise_token(example, rng):
    return {**example, "noise": int(rng.integers(1 << 30))}


def _drop_empty_question(example):
    return example if example["question"] else None


def test_user_functions_are_seeded_per_example_and_drops_are_counted(features):
    steps = [
        _drop_empty_question,
        _add_noise_token,
        functools.partial(
            pp.rekey, key_map={"inputs": "question", "targets": "answer", "noise": "noise"}
        ),
        pp.tokenize,
    ]
    task = _make_task("test_user_functions", steps, features)
    first = [e["noise"] for e in task.get_dataset("train", seed=5)]
    again = [e["noise"] for e in task.get_dataset("train", seed=5)]
    other = [e["noise"] for e in task.get_dataset("train", seed=6)]
    assert first == again != other and len(first) == 4
    assert task.dropped_example_counts["_drop_empty_question"] == 3


def test_missing_feature_names_feature_and_task(features):
    steps = [functools.partial(pp.rekey, key_map={"inputs": "question"}), pp.tokenize]
    task = _make_task("test_missing_targets", steps, features)
    with pytest.raises(
        DataError,
        match=r"task 'test_missing_targets': example has no feature "
        r"'targets' \(has: inputs, inputs_pretokenized\)",
    ):
        next(iter(task.get_dataset("train")))
    untokenized = _make_task(
        "test_untokenized",
        [functools.partial(pp.rekey, key_map={"inputs": "question", "targets": "answer"})],
        features,
    )
    with pytest.raises(DataError, match=r"feature 'inputs' is still text; add the tokenize"):
        next(iter(untokenized.get_dataset("train")))


def test_preprocessor_errors_name_the_task(features):
    task = _make_task("test_bad_rekey", [pp.rekey.bind(key_map={"inputs": "nope"})], features)
    with pytest.raises(
        DataError,
        match=r"task 'test_bad_rekey', preprocessor rekey: example "
        r"has no field 'nope'",
    ):
        next(iter(task.get_dataset("train")))


def _question(example):
    return example["question"]


def _choices(example):
    return ["yes", "no", "maybe"]


def _correct(example):
    return [example["id"] % 3 == i for i in range(3)]


def test_rank_classification_one_example_per_choice(features):
    steps = [
        pp.rank_classification.bind(
            inputs_fn=_question, targets_fn=_choices, is_correct_fn=_correct
        ),
        pp.tokenize,
    ]
    task = _make_task("test_rank_classification", steps, features)
    examples = list(task.get_dataset("train", shuffle=False))
    assert len(examples) == 15
    assert [e["idx"].tolist() for e in examples[:4]] == [[0, 0], [0, 1], [0, 2], [1, 0]]
    assert [e["is_correct"] for e in examples[3:6]] == [False, True, False]
    assert examples[4]["targets_pretokenized"] == "no"
    train = _make_task(
        "test_rank_classification_train",
        [
            pp.rank_classification.bind(
                inputs_fn=_question, targets_fn=_choices, is_correct_fn=_correct, mode="train"
            ),
            pp.tokenize,
        ],
        features,
    )
    assert len(list(train.get_dataset("train"))) == 5


def _long_rows(split):
    return [{"text": "this is a test " * (5 + i)} for i in range(6)]


@pytest.mark.parametrize("objective", [pp.prefix_lm, pp.iid_denoising])
def test_prefix_lm_and_iid_denoising_keep_all_tokens(objective, features, vocab):
    steps = [pp.rekey.bind(key_map={"inputs": None, "targets": "text"}), pp.tokenize, objective]
    task = Task(f"test_{objective.name}", FunctionSource(_long_rows, ["train"]), steps, features)
    lengths = {"inputs": 20, "targets": 20}
    examples = list(task.get_dataset("train", sequence_length=lengths, shuffle=False))
    first_doc = vocab.encode("this is a test " * 5)
    first_sentinel = vocab.vocab_size - 10
    if objective is pp.prefix_lm:
        joined = np.concatenate([examples[0]["inputs"], examples[0]["targets"]]).tolist()
        assert joined == first_doc[:19] and len(examples[0]["inputs"]) >= 1
    else:
        kept = [t for t in examples[0]["inputs"].tolist() if t < first_sentinel]
        noise = [t for t in examples[0]["targets"].tolist() if t < first_sentinel]
        assert len(kept) + len(noise) == 19
    again = list(task.get_dataset("train", sequence_length=lengths, shuffle=False))
    assert all(np.array_equal(a["inputs"], b["inputs"]) for a, b in zip(examples, again))


def test_objectives_need_sequence_length(features):
    task = _make_task(
        "test_needs_lengths",
        [
            pp.rekey.bind(key_map={"inputs": None, "targets": "question"}),
            pp.tokenize,
            pp.span_corruption,
        ],
        features,
    )
    with pytest.raises(DataError, match=r"span_corruption needs sequence_length with inputs"):
        task.get_dataset("train")
    with pytest.raises(
        DataError,
        match=r"makes 114 target tokens; set "
        r"sequence_length\['targets'\] >= 114",
    ):
        task.get_dataset("train", sequence_length={"inputs": 512, "targets": 100})
