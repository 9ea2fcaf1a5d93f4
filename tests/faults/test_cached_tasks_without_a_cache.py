"""USE_CACHED_TASKS left True (T5X's run files default to it) for a task nobody cached: with no
cache directory configured the one line says so and how to turn caching off or name a cache;
with a cache directory that lacks the task, it names the directory and the command to fill it.
No step is taken and no prediction written."""

from __future__ import annotations

import pytest
from commands import TASK

from .conftest import error_line

NO_CACHE_DIR = (
    f"error: task '{TASK}' is read from its cache (use_cached=True, T5X's USE_CACHED_TASKS), but "
    "no cache directory is configured; read its data directly with --gin.USE_CACHED_TASKS=False "
    "(use_cached=False), or name the folder holding its cache with "
    f"--seqio_additional_cache_dirs=DIR (build one with `t5forge cache-tasks --tasks={TASK} "
    "--output_cache_dir=DIR`)"
)


def _run(faults, trained, command, tmp_path, *extra):
    """`t5forge COMMAND` of the tiny model on the bundled task, with caching turned on."""
    if command == "train":
        return faults.train(tmp_path / "run", 5, "--gin.USE_CACHED_TASKS=True", *extra)
    output = "INFER_OUTPUT_DIR" if command == "infer" else "EVAL_OUTPUT_DIR"
    return faults.run(
        command,
        f"--gin_file={faults.gin}",
        f"--gin_file=runs/{command}.gin",
        "--gin.DROPOUT_RATE=0.0",
        f"--gin.MIXTURE_OR_TASK_NAME={TASK}",
        "--gin.TASK_FEATURE_LENGTHS={'inputs': 32, 'targets': 8}",
        f"--gin.CHECKPOINT_PATH={trained / 'checkpoint_12'}",
        f"--gin.{output}={tmp_path / 'out'}",
        "--gin.USE_CACHED_TASKS=True",
        *extra,
    )


@pytest.mark.parametrize("command", ["train", "infer", "eval"])
def test_no_cache_directory_says_how_to_turn_caching_off(faults, trained, command, tmp_path):
    assert error_line(_run(faults, trained, command, tmp_path)) == NO_CACHE_DIR
    assert not list(tmp_path.glob("out/**/*.jsonl")) and not list(tmp_path.glob("run/checkpoint_*"))


def test_a_cache_directory_without_the_task_names_it_and_the_command(faults, trained, tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    line = error_line(
        _run(faults, trained, "train", tmp_path, f"--seqio_additional_cache_dirs={cache}")
    )
    assert line == (
        f"error: task '{TASK}' has no completed cache of split 'train' in [{str(cache)!r}]; "
        f"build it with `t5forge cache-tasks --tasks={TASK} --output_cache_dir={cache}` or set "
        "use_cached=False"
    )
