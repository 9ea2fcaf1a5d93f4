"""cache-tasks on Apache Beam writes the local writer's cache: same files, same training stream.

Pipelines run on Beam's DirectRunner with two worker threads; work units are made small so
every split is cut into many ranges that finish in any order.
"""

import json

import numpy as np
import pytest

from t5forge.cli import cache_tasks
from t5forge.data import Task, TaskRegistry
from t5forge.data.cache import search_dirs as cache_dirs
from t5forge.data.cache.beam import SplitJob, plan_work_units, run_beam_cache
from t5forge.data.cache.store import CachedSource, write_task_cache
from t5forge.data.preprocessors import CacheDatasetPlaceholder
from t5forge.errors import ConfigError, DataError
from t5forge.tasks.builtin import span_corruption_task

pytest.importorskip("apache_beam")

TWO_WORKERS = [
    "--runner=DirectRunner",
    "--direct_num_workers=2",
    "--direct_running_mode=multi_threading",
]


def keep_some_with_a_draw(example, rng):
    """A random step that drops about a quarter of the examples: positions shift."""
    if rng.random() < 0.25:
        return None
    return {**example, "draw": int(rng.integers(1_000_000))}


def drop_everything(example):
    return None


def with_cached_step(task, name, step):
    """`task` with `step` added just before its cache point."""
    steps = list(task.cached_preprocessors) + [step, CacheDatasetPlaceholder()]
    steps += list(task.uncached_preprocessors)
    return Task(name, task.source, steps, task.output_features)


class ReadOnce:
    """A streaming split: iterable only, so it cannot be cut into index ranges."""

    def __init__(self, examples):
        self._examples = examples

    def __iter__(self):
        return iter(self._examples)


class StreamingSource:
    def __init__(self, source):
        self._source = source

    @property
    def split_names(self):
        return self._source.split_names

    def num_examples(self, split):
        return None

    def split(self, split):
        return ReadOnce(list(self._source.split(split)))


@pytest.fixture(scope="module")
def sentiment(make_sentiment_task, spm_vocabulary):
    return make_sentiment_task("beam_sentiment", spm_vocabulary)


def plain(example):
    return {name: np.asarray(value).tolist() for name, value in example.items()}


def files_of(task_dir):
    return {path.name: path.read_bytes() for path in sorted(task_dir.iterdir())}


def training_stream(task, cache_dir, sequence_length):
    """What training reads from the cache in `cache_dir` (shuffled, seed 7)."""
    previous = cache_dirs.get_global_cache_dirs()
    cache_dirs.set_global_cache_dirs([str(cache_dir)])
    try:
        dataset = task.get_dataset(
            "validation", sequence_length=sequence_length, shuffle=True, seed=7, use_cached=True
        )
        return [plain(example) for example in dataset]
    finally:
        cache_dirs.set_global_cache_dirs(previous)


def cache_both_ways(task, tmp_path, shard_count, examples_per_unit):
    local = write_task_cache(task, "validation", tmp_path / "local", shard_count, progress=False)
    job = SplitJob(task, "validation", shard_count)
    run_beam_cache([job], tmp_path / "beam", TWO_WORKERS, examples_per_unit=examples_per_unit)
    return local, tmp_path / "beam" / task.name


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_beam_writes_the_local_cache_when_a_random_step_drops_examples(sentiment, tmp_path):
    task = with_cached_step(sentiment, "beam_sentiment_dropping", keep_some_with_a_draw)
    assert len(plan_work_units(task, "validation", 97)) == 11  # 1000 examples
    local, beam = cache_both_ways(task, tmp_path, shard_count=3, examples_per_unit=97)

    assert files_of(beam) == files_of(local)  # shards, info, stats and marker, byte for byte
    stats = json.loads((beam / "stats.validation.json").read_text())
    assert 650 < stats["examples"] < 850  # the step really dropped examples
    lengths = {"inputs": 256, "targets": 16}
    assert training_stream(task, tmp_path / "beam", lengths) == (
        training_stream(task, tmp_path / "local", lengths)
    )


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_beam_caches_the_span_corruption_task_as_training_reads_it(
    shared_data, spm_vocabulary, tmp_path
):
    task = span_corruption_task("beam_english", shared_data, "english_corpus", spm_vocabulary)
    local, beam = cache_both_ways(task, tmp_path, shard_count=4, examples_per_unit=64)

    assert files_of(beam) == files_of(local)
    lengths = {"inputs": 64, "targets": 16}
    from_beam = training_stream(task, tmp_path / "beam", lengths)
    assert len(from_beam) > 500  # 500 documents make more span-corrupted segments
    assert from_beam == training_stream(task, tmp_path / "local", lengths)


@pytest.mark.timeout(300)
def test_a_streaming_split_is_one_work_unit_and_the_same_cache(sentiment, tmp_path):
    task = Task(
        "beam_streaming",
        StreamingSource(sentiment.source),
        sentiment.preprocessors,
        sentiment.output_features,
    )
    assert len(plan_work_units(task, "validation", 10)) == 1
    local, beam = cache_both_ways(task, tmp_path, shard_count=2, examples_per_unit=10)
    assert files_of(beam) == files_of(local)


@pytest.mark.timeout(300)
def test_a_split_that_yields_nothing_is_one_line_and_not_completed(sentiment, tmp_path):
    task = with_cached_step(sentiment, "beam_sentiment_empty", drop_everything)
    with pytest.raises(DataError) as error:
        run_beam_cache([SplitJob(task, "validation", 2)], tmp_path, TWO_WORKERS, 250)
    assert str(error.value) == (
        "task 'beam_sentiment_empty' split 'validation' produced no examples; nothing to cache "
        "(check the source files and the task's filters)"
    )
    with pytest.raises(DataError, match="no completed cache"):
        CachedSource(task.name, "validation", tmp_path)


@pytest.fixture
def registered(sentiment):
    TaskRegistry.remove(sentiment.name)
    TaskRegistry.add(sentiment)
    yield sentiment
    TaskRegistry.remove(sentiment.name)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_cli_runs_beam_by_regex_skips_complete_splits_and_overwrites(registered, tmp_path, capsys):
    arguments = [
        "--tasks=beam_sent.*",
        f"--output_cache_dir={tmp_path}",
        "--splits=validation",
        "--min_shards=2",
        *TWO_WORKERS,
    ]
    assert cache_tasks.main(arguments) == 0
    assert "cached beam_sentiment:validation" in capsys.readouterr().out
    source = CachedSource(registered.name, "validation", tmp_path)
    assert len(source) == 1000 and source.info["num_shards"] == 2
    marker = tmp_path / registered.name / "COMPLETED"
    written = marker.stat().st_mtime_ns

    assert cache_tasks.main(arguments) == 0
    assert capsys.readouterr().out == (
        "skipped beam_sentiment:validation: already cached (--overwrite rebuilds it)\n"
    )
    assert marker.stat().st_mtime_ns == written

    assert cache_tasks.main([*arguments, "--overwrite"]) == 0
    assert "cached beam_sentiment:validation" in capsys.readouterr().out
    assert marker.stat().st_mtime_ns != written


def test_cli_refuses_beam_options_without_a_runner(tmp_path):
    with pytest.raises(ConfigError, match="'--direct_num_workers=2'; Beam pipeline options need"):
        cache_tasks.main(["--tasks=x", f"--output_cache_dir={tmp_path}", "--direct_num_workers=2"])
