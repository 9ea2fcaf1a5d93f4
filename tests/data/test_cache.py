"""Task caches: round trip, files written, incomplete caches ignored, the CLI, error text."""

import json

import numpy as np
import pytest
from commands import t5forge

from t5forge.cli import cache_tasks
from t5forge.data import TaskRegistry
from t5forge.data.cache import search_dirs as cache_dirs
from t5forge.data.cache.store import CachedSource, write_task_cache
from t5forge.errors import DataError

LENGTHS = {"inputs": 256, "targets": 16}


@pytest.fixture(scope="module")
def sentiment(make_sentiment_task, spm_vocabulary):
    return make_sentiment_task("cache_sentiment", spm_vocabulary)


@pytest.fixture
def cache_dirs_set_to():
    """Points the tasks' global cache search path somewhere for one test."""
    previous = cache_dirs.get_global_cache_dirs()
    yield lambda *dirs: cache_dirs.set_global_cache_dirs([str(d) for d in dirs])
    cache_dirs.set_global_cache_dirs(previous)


def plain(example):
    return {name: np.asarray(value).tolist() for name, value in example.items()}


def test_cache_round_trip_gives_the_uncached_examples(sentiment, tmp_path, cache_dirs_set_to):
    task_dir = write_task_cache(sentiment, "validation", tmp_path, shard_count=3, progress=False)
    assert task_dir == tmp_path / "cache_sentiment"
    assert sorted(p.name for p in task_dir.iterdir()) == [
        "COMPLETED",
        "info.validation.json",
        "stats.validation.json",
        "validation.array_record-00000-of-00003",
        "validation.array_record-00001-of-00003",
        "validation.array_record-00002-of-00003",
    ]
    uncached = [plain(e) for e in sentiment.get_uncached_examples("validation")]
    source = CachedSource("cache_sentiment", "validation", [tmp_path / "elsewhere", tmp_path])
    assert len(source) == 1000
    assert [plain(source[i]) for i in range(len(source))] == uncached

    info = json.loads((task_dir / "info.validation.json").read_text())
    assert info["num_shards"] == 3
    assert info["features"]["inputs"] == {"dtype": "int32", "shape": [None]}
    assert info["features"]["inputs_pretokenized"] == {"dtype": "string", "shape": []}
    stats = json.loads((task_dir / "stats.validation.json").read_text())
    assert stats["examples"] == 1000
    assert stats["inputs_tokens"] == sum(len(e["inputs"]) for e in uncached)
    assert stats["targets_max_tokens"] == max(len(e["targets"]) for e in uncached)

    # The whole task pipeline over the cache equals the pipeline over the raw data.
    cache_dirs_set_to(tmp_path)
    options = dict(sequence_length=LENGTHS, shuffle=True, seed=3)
    cached = sentiment.get_dataset("validation", use_cached=True, **options)
    fresh = sentiment.get_dataset("validation", use_cached=False, **options)
    assert [plain(e) for e in cached] == [plain(e) for e in fresh]


def test_missing_cache_names_the_task_dirs_and_the_command(tmp_path):
    with pytest.raises(DataError) as error:
        CachedSource("nowhere_task", "train", [tmp_path])
    assert str(error.value) == (
        f"task 'nowhere_task' has no completed cache of split 'train' in [{str(tmp_path)!r}]; "
        f"build it with `t5forge cache-tasks --tasks=nowhere_task --output_cache_dir={tmp_path}` "
        "or set use_cached=False"
    )


def test_an_interrupted_cache_is_never_read(sentiment, tmp_path):
    task_dir = write_task_cache(sentiment, "validation", tmp_path, shard_count=1, progress=False)
    (task_dir / "COMPLETED").unlink()  # as if the writer died before finishing
    with pytest.raises(DataError, match="ignored incomplete cache in .*cache_sentiment"):
        CachedSource("cache_sentiment", "validation", [tmp_path])


def test_cli_caches_a_registered_task(sentiment, tmp_path, capsys):
    TaskRegistry.remove(sentiment.name)
    TaskRegistry.add(sentiment)
    try:
        status = cache_tasks.main(
            [
                f"--tasks={sentiment.name}",
                f"--output_cache_dir={tmp_path}",
                "--splits=validation",
                "--min_shards=2",
                "--no_progress",
            ]
        )
    finally:
        TaskRegistry.remove(sentiment.name)
    assert status == 0
    assert "cached cache_sentiment:validation" in capsys.readouterr().out
    assert len(CachedSource(sentiment.name, "validation", tmp_path)) == 1000
    assert CachedSource(sentiment.name, "validation", tmp_path).info["num_shards"] == 2


def test_module_entry_point_reports_unknown_tasks_in_one_line(tmp_path):
    result = t5forge(
        "cache-tasks",
        "--tasks=no_such_task_anywhere",
        f"--output_cache_dir={tmp_path}",
        timeout=120,
    )
    assert result.returncode == 2
    assert result.stderr.startswith("error: unknown task or mixture 'no_such_task_anywhere'")


def test_cli_skips_complete_splits_and_overwrite_rebuilds_them(sentiment, tmp_path, capsys):
    TaskRegistry.remove(sentiment.name)
    TaskRegistry.add(sentiment)
    arguments = [
        "--tasks=cache_sent[a-z]+",  # a regex over the registered names
        f"--output_cache_dir={tmp_path}",
        "--splits=validation",
        "--no_progress",
    ]
    try:
        runs = []
        for extra in ([], [], ["--overwrite"]):
            assert cache_tasks.main(arguments + extra) == 0
            runs.append(capsys.readouterr().out)
    finally:
        TaskRegistry.remove(sentiment.name)
    assert runs[0].startswith("cached cache_sentiment:validation")
    assert (
        runs[1] == "skipped cache_sentiment:validation: already cached (--overwrite rebuilds it)\n"
    )
    assert runs[2].startswith("cached cache_sentiment:validation")
