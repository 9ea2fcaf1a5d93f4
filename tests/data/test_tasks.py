"""Tasks and mixtures: determinism, exact resume, rates, registries, caching and errors."""

import functools
import hashlib
import pickle

import numpy as np
import pytest

import t5forge.tasks  # noqa: F401  (registers the built-in tasks)
from t5forge.data import (
    Feature,
    FunctionSource,
    JsonLinesSource,
    Mixture,
    MixtureRegistry,
    SentencePieceVocabulary,
    Task,
    TaskRegistry,
    get_mixture_or_task,
    mixing_rate_num_examples,
)
from t5forge.data import preprocessors as pp
from t5forge.data.cache import search_dirs as cache_dirs
from t5forge.data.providers import task as tasks_lib
from t5forge.errors import DataError

BUILTIN = [
    "debian_section_classify",
    "debian_summarize",
    "en_de_lohelp_translate",
    "en_ro_messages_translate",
    "english_span_corruption",
    "english_ul2",
    "romanian_span_corruption",
    "rotten_tomatoes_sentiment",
]


@pytest.fixture(scope="module")
def features(test_spm_path):
    vocab = SentencePieceVocabulary(test_spm_path, extra_ids=10)
    return {"inputs": Feature(vocab), "targets": Feature(vocab)}


def _sentiment_task(name, shared_data, features, prefix="sentiment"):
    folder = shared_data / "rotten_tomatoes"
    source = JsonLinesSource({s: str(folder / f"{s}.jsonl.gz") for s in ("train", "validation")})
    steps = [
        pp.classify.bind(text_key="text", label_key="label", prefix=prefix),
        pp.tokenize,
        pp.CacheDatasetPlaceholder(),
        pp.append_eos_after_trim,
    ]
    return Task(name, source, steps, features)


@pytest.fixture(scope="module")
def sentiment(shared_data, features):
    return _sentiment_task("test_sentiment", shared_data, features)


def _same(a, b):
    return a.keys() == b.keys() and all(
        np.array_equal(a[k], b[k]) if isinstance(a[k], np.ndarray) else a[k] == b[k] for k in a
    )


def _take(iterator, n):
    return [next(iterator) for _ in range(n)]


def test_same_seed_same_examples_and_seed_changes_order(sentiment):
    lengths = {"inputs": 32, "targets": 4}
    first = _take(iter(sentiment.get_dataset("validation", sequence_length=lengths, seed=7)), 20)
    again = _take(iter(sentiment.get_dataset("validation", sequence_length=lengths, seed=7)), 20)
    other = _take(iter(sentiment.get_dataset("validation", sequence_length=lengths, seed=8)), 20)
    assert all(_same(a, b) for a, b in zip(first, again))
    assert [e["inputs_pretokenized"] for e in first] != [e["inputs_pretokenized"] for e in other]
    assert all(len(e["inputs"]) <= 32 and e["inputs"][-1] == 1 for e in first)


def test_unshuffled_order_is_file_order(sentiment):
    rows = sentiment.source.split("validation")
    got = _take(iter(sentiment.get_dataset("validation", shuffle=False)), 3)
    assert [e["inputs_pretokenized"] for e in got] == [
        f"sentiment: {rows[i]['text']}" for i in range(3)
    ]


def test_task_seed_is_md5_of_name_plus_seed():
    digest = int(hashlib.md5(b"my_task").hexdigest(), 16)
    assert tasks_lib.task_seed("my_task", 5) == (digest + 5) % 2**32


def test_iterator_state_restores_exactly(sentiment):
    iterator = iter(sentiment.get_dataset("train", seed=1, num_epochs=None))
    _take(iterator, 11)
    state = iterator.get_state()
    expected = _take(iterator, 10)
    resumed = iter(sentiment.get_dataset("train", seed=1, num_epochs=None))
    resumed.set_state(state)
    assert all(_same(a, b) for a, b in zip(expected, _take(resumed, 10)))


def test_shards_are_disjoint_and_cover_the_split(sentiment):
    texts = [
        [
            e["inputs_pretokenized"]
            for e in sentiment.get_dataset("validation", shard_index=i, num_shards=3)
        ]
        for i in range(3)
    ]
    assert sum(map(len, texts)) == 1000
    assert len(set().union(*texts)) == 1000
    with pytest.raises(DataError, match=r"shard_index 3 must be in \[0, num_shards=3\)"):
        sentiment.get_dataset("validation", shard_index=3, num_shards=3)


def test_epochs(sentiment):
    two = list(sentiment.get_dataset("validation", num_epochs=2, shuffle=False))
    assert len(two) == 2000
    assert two[0]["inputs_pretokenized"] == two[1000]["inputs_pretokenized"]


def _empty(split):
    return []


def _stream(split):
    return ({"inputs": f"this is {i}", "targets": "a test"} for i in range(10))


def test_empty_split_is_one_line_error(features):
    task = Task("test_empty", FunctionSource(_empty, ["train"]), [pp.tokenize], features)
    with pytest.raises(
        DataError,
        match=r"^task 'test_empty' split 'train' is empty; check the "
        r"data files$",
    ):
        task.get_dataset("train")
    with pytest.raises(
        DataError,
        match=r"task 'test_empty' has no split 'validation'; splits: "
        r"train",
    ):
        task.get_dataset("validation")


def test_streaming_source_resumes(features):
    task = Task("test_stream", FunctionSource(_stream, ["train"]), [pp.tokenize], features)
    iterator = iter(task.get_dataset("train", num_epochs=None, shuffle=False))
    _take(iterator, 13)
    state = iterator.get_state()
    expected = _take(iterator, 4)
    resumed = iter(task.get_dataset("train", num_epochs=None, shuffle=False))
    resumed.set_state(state)
    assert (
        [e["inputs_pretokenized"] for e in _take(resumed, 4)]
        == [e["inputs_pretokenized"] for e in expected]
        == [f"this is {i}" for i in (3, 4, 5, 6)]
    )


def _three(split):
    return [{"inputs": "a", "targets": "b"}] * 3


def test_mixing_rate_golden(features):
    task = Task("test_three", FunctionSource(_three, ["train"]), [pp.tokenize], features)
    assert mixing_rate_num_examples(task) == 3.0
    assert mixing_rate_num_examples(task, scale=27) == 81.0
    assert mixing_rate_num_examples(task, scale=27, temperature=2) == 9.0
    assert mixing_rate_num_examples(task, maximum=50.5, scale=27, temperature=0.5) == 2550.25


def test_mixture_samples_by_rate_and_resumes(shared_data, features, sentiment):
    other = _sentiment_task("test_sentiment_b", shared_data, features, prefix="opinion")
    mixture = Mixture("test_mix", [(sentiment, 1.0), (other, 3.0)])
    iterator = iter(mixture.get_dataset("train", seed=4, num_epochs=None))
    first = _take(iterator, 400)
    opinion = (
        sum(
            other.output_features["inputs"]
            .vocabulary.decode(e["inputs"].tolist())
            .startswith("opinion")
            for e in first
        )
        / 400
    )
    assert 0.68 <= opinion <= 0.82, opinion
    assert set(first[0]) == {"inputs", "targets"}
    state = iterator.get_state()
    expected = _take(iterator, 10)
    resumed = iter(mixture.get_dataset("train", seed=4, num_epochs=None))
    resumed.set_state(state)
    assert all(_same(a, b) for a, b in zip(expected, _take(resumed, 10)))
    again = _take(iter(mixture.get_dataset("train", seed=4, num_epochs=None)), 400)
    assert all(_same(a, b) for a, b in zip(first, again))


def test_mixture_rates_callables_and_submixtures(features):
    small = Task("test_mix_small", FunctionSource(_three, ["train"]), [pp.tokenize], features)
    rate = functools.partial(mixing_rate_num_examples, scale=2)
    mixture = Mixture("test_rates", [small], default_rate=rate)
    assert mixture.get_rate(small) == 6.0
    outer = Mixture("test_outer", [(mixture, 0.5)])
    assert outer.get_rate(small) == 0.5
    with pytest.raises(DataError, match=r"no rate for 'test_mix_small'"):
        Mixture("test_no_rate", [small])


def test_registries_and_close_names(features):
    task = TaskRegistry.add(
        "test_registered", FunctionSource(_three, ["train"]), [pp.tokenize], features
    )
    try:
        assert TaskRegistry.get("test_registered") is task
        assert get_mixture_or_task("test_registered") is task
        with pytest.raises(DataError, match=r"already registered; call TaskRegistry.remove"):
            TaskRegistry.add(task)
        MixtureRegistry.add("test_registered_mix", [("test_registered", 1.0)])
        assert get_mixture_or_task("test_registered_mix").tasks == [task]
    finally:
        TaskRegistry.remove("test_registered")
        MixtureRegistry.remove("test_registered_mix")
    with pytest.raises(
        DataError,
        match=r"unknown task or mixture 'rotten_tomatoes_sentimnt'; "
        r"did you mean rotten_tomatoes_sentiment\?",
    ) as e:
        get_mixture_or_task("rotten_tomatoes_sentimnt")
    assert "\n" not in str(e.value)


def test_builtin_tasks_are_registered_and_read_real_data(monkeypatch, test_spm_path):
    assert set(BUILTIN) <= set(TaskRegistry.names())
    monkeypatch.setenv("T5FORGE_VOCAB", str(test_spm_path))
    task = TaskRegistry.get("en_de_lohelp_translate")
    assert task.num_input_examples("validation") == 1000
    example = next(
        iter(
            task.get_dataset(
                "validation", shuffle=False, sequence_length={"inputs": 64, "targets": 64}
            )
        )
    )
    assert example["inputs_pretokenized"].startswith("translate English to German: ")
    assert example["targets"][-1] == 1


def test_without_a_data_dir_only_the_bundled_slice_is_read(monkeypatch, test_spm_path):
    from t5forge.tasks.builtin import BUNDLED_DATA_DIR, builtin_tasks

    monkeypatch.delenv("T5FORGE_DATA_DIR")
    monkeypatch.setenv("T5FORGE_VOCAB", str(test_spm_path))
    tasks = {task.name: task for task in builtin_tasks()}
    assert tasks["en_de_lohelp_translate"].num_input_examples("validation") == 400
    with pytest.raises(
        DataError,
        match=rf"{BUNDLED_DATA_DIR}/rotten_tomatoes/train.jsonl.gz.*"
        "set T5FORGE_DATA_DIR",
    ):
        next(iter(tasks["rotten_tomatoes_sentiment"].get_dataset("train")))


def test_cache_round_trip(sentiment, tmp_path):
    from t5forge.data.cache.store import write_task_cache

    write_task_cache(sentiment, "validation", tmp_path, progress=False)
    cache_dirs.set_global_cache_dirs([str(tmp_path)])
    try:
        cached = list(
            sentiment.get_dataset(
                "validation",
                use_cached=True,
                shuffle=False,
                sequence_length={"inputs": 16, "targets": 4},
            )
        )
    finally:
        cache_dirs.set_global_cache_dirs([])
    uncached = list(
        sentiment.get_dataset(
            "validation", shuffle=False, sequence_length={"inputs": 16, "targets": 4}
        )
    )
    assert len(cached) == len(uncached) == 1000
    for a, b in zip(cached, uncached):
        assert np.array_equal(a["inputs"], b["inputs"])
        assert np.array_equal(a["targets"], b["targets"])


def test_uncached_examples_stop_at_the_placeholder(sentiment):
    examples = list(sentiment.get_uncached_examples("validation", shard_index=1, num_shards=4))
    assert len(examples) == 250
    assert examples[0]["inputs"][-1] != 1  # append_eos_after_trim runs after the cache


def test_pipelines_pickle_for_grain_workers(sentiment, shared_data, features):
    mixture = Mixture("test_pickled_mix", [(sentiment, 1.0)])
    for ds in (
        sentiment.get_dataset("train", sequence_length={"inputs": 16, "targets": 4}),
        mixture.get_dataset("train", num_epochs=None),
    ):
        clone = pickle.loads(pickle.dumps(ds))
        assert all(_same(a, b) for a, b in zip(_take(iter(ds), 5), _take(iter(clone), 5)))
