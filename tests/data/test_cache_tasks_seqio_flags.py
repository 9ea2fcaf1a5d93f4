"""SeqIO's `seqio_cache_tasks` flags on `t5forge cache-tasks`: --excluded_tasks,
--tasks_additional_cache_dirs with --ignore_other_caches, --max_shards, --base_seed,
--enable_char_counts, --output_format, --pipeline_options (Beam), absl's boolean spellings.

Task b has a random step before its cache point, so the seed shows in what is cached.
"""

import json

import numpy as np
import pytest

from t5forge.cli import cache_tasks
from t5forge.data import Task, TaskRegistry
from t5forge.data.cache import search_dirs as cache_dirs
from t5forge.data.cache.store import CachedSource
from t5forge.data.preprocessors import CacheDatasetPlaceholder
from t5forge.errors import ConfigError

LENGTHS = {"inputs": 256, "targets": 16}


def tag_with_a_draw(example, rng):
    return {**example, "draw": int(rng.integers(1_000_000))}


@pytest.fixture(scope="module")
def two_tasks(make_sentiment_task, spm_vocabulary):
    """seqflags_a, and seqflags_b: the same with a random step before its cache point."""
    a = make_sentiment_task("seqflags_a", spm_vocabulary)
    steps = [*a.cached_preprocessors, tag_with_a_draw, CacheDatasetPlaceholder()]
    b = Task("seqflags_b", a.source, steps + list(a.uncached_preprocessors), a.output_features)
    for task in (a, b):
        TaskRegistry.remove(task.name)
        TaskRegistry.add(task)
    yield a, b
    for task in (a, b):
        TaskRegistry.remove(task.name)


def cache(tmp_dir, *flags):
    args = ["--tasks=seqflags_.*", f"--output_cache_dir={tmp_dir}", "--splits=validation"]
    return cache_tasks.main([*args, "--no_progress", *flags])


def plain(example):
    return {name: np.asarray(value).tolist() for name, value in example.items()}


def test_excluded_tasks_max_shards_char_counts_and_output_format(two_tasks, tmp_path, capsys):
    a, _ = two_tasks
    flags = ["--excluded_tasks=.*_b", "--min_shards=5", "--max_shards=2", "--enable_char_counts"]
    assert cache(tmp_path, *flags, "--output_format=tfrecord") == 0
    out, err = capsys.readouterr()
    assert "skipped seqflags_b: --excluded_tasks=.*_b" in out and "cached seqflags_a" in out
    assert "--output_format=tfrecord: t5forge writes its caches as ArrayRecord" in err
    assert not (tmp_path / "seqflags_b").exists()
    assert CachedSource(a.name, "validation", tmp_path).info["num_shards"] == 2  # capped
    stats = json.loads((tmp_path / a.name / "stats.validation.json").read_text())
    vocabulary = a.output_features["inputs"].vocabulary
    examples = list(a.get_uncached_examples("validation"))
    assert stats["inputs_chars"] == sum(len(vocabulary.decode(list(e["inputs"]))) for e in examples)
    assert stats["targets_chars"] > 0 and stats["examples"] == len(examples) == 1000


def test_other_caches_are_not_written_again_unless_ignored(two_tasks, tmp_path, capsys):
    other, out = tmp_path / "other", tmp_path / "out"
    assert cache(other, "--excluded_tasks=seqflags_b") == 0
    capsys.readouterr()
    assert cache(out, f"--tasks_additional_cache_dirs={other}") == 0
    printed = capsys.readouterr().out
    assert f"skipped seqflags_a:validation: already cached in {other}" in printed
    assert "cached seqflags_b:validation" in printed and not (out / "seqflags_a").exists()
    assert cache(out, f"--tasks_additional_cache_dirs={other}", "--ignore_other_caches=true") == 0
    printed = capsys.readouterr().out
    assert "cached seqflags_a:validation" in printed  # written here too
    assert "skipped seqflags_b:validation: already cached (--overwrite" in printed


def test_base_seed_caches_what_an_uncached_run_with_that_seed_reads(two_tasks, tmp_path):
    """In order: shuffled, an uncached run draws after shuffling, a cached one before."""
    _, b = two_tasks
    assert cache(tmp_path, "--excluded_tasks=seqflags_a", "--base_seed=3") == 0
    previous = cache_dirs.get_global_cache_dirs()
    cache_dirs.set_global_cache_dirs([str(tmp_path)])
    try:
        read = {
            cached: [
                plain(e)
                for e in b.get_dataset(
                    "validation", sequence_length=LENGTHS, shuffle=False, seed=3, use_cached=cached
                )
            ]
            for cached in (True, False)
        }
    finally:
        cache_dirs.set_global_cache_dirs(previous)
    # The same examples in the same order (the cache also keeps the step's extra feature).
    assert [{k: e[k] for k in read[False][0]} for e in read[True]] == read[False]
    cached_draws = [e["draw"] for e in CachedSource(b.name, "validation", tmp_path)]
    draws = {
        seed: [e["draw"] for e in b.get_uncached_examples("validation", seed=seed)]
        for seed in (0, 3)
    }
    assert cached_draws == draws[3] != draws[0]  # the seed reached the random step


def test_bad_excluded_tasks_regex_is_one_line(two_tasks, tmp_path):
    with pytest.raises(ConfigError, match=r"--excluded_tasks='\(' is not a regex"):
        cache(tmp_path, "--excluded_tasks=(")


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_pipeline_options_run_beam_with_the_seed_and_char_counts(two_tasks, tmp_path, capsys):
    """SeqIO's --pipeline_options: the Beam cache equals the local one, byte for byte."""
    flags = ["--excluded_tasks=seqflags_a", "--base_seed=3", "--enable_char_counts"]
    assert cache(tmp_path / "local", *flags) == 0
    beam_options = (
        "--runner=DirectRunner,--direct_num_workers=2,--direct_running_mode=multi_threading"
    )
    pytest.importorskip("apache_beam")
    assert cache(tmp_path / "beam", *flags, f"--pipeline_options={beam_options}") == 0
    files = [
        {p.name: p.read_bytes() for p in sorted((tmp_path / side / "seqflags_b").iterdir())}
        for side in ("local", "beam")
    ]
    assert files[0] == files[1]
    assert "inputs_chars" in json.loads(files[1]["stats.validation.json"])
