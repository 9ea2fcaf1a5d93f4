"""Commands keep their compiled programs in JAX's persistent cache: a resumed run reads its
train step back instead of compiling it (T5 1.1 small's takes ~50 s on 2 cores)."""

import json
import re
import subprocess
import sys

import pytest


@pytest.mark.slow
def test_a_resumed_run_reads_its_train_step_from_the_compile_cache(tiny_runs, tmp_path):
    cache, model_dir = tmp_path / "cache", tmp_path / "run"
    # Every program is kept, however quick (the tiny model's compile in well under JAX's 1 s);
    # JAX logs its compilations and its cache hits.
    env = tiny_runs.env(JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0, JAX_LOG_COMPILES=1)
    flag = f"--compile_cache={cache}"
    first = tiny_runs.train(model_dir, 2, flag, period=2, env=env, check=True)
    written = sorted(path.name for path in cache.glob("*train_step*"))
    assert written, sorted(path.name for path in cache.iterdir())
    assert not re.search(r"cache hit for '[^']*train_step", first.stderr)

    resumed = tiny_runs.train(model_dir, 4, flag, period=2, env=env, check=True)
    assert "resumed from" in resumed.stderr
    assert re.search(r"cache hit for '[^']*train_step", resumed.stderr), resumed.stderr[-3000:]
    assert sorted(path.name for path in cache.glob("*train_step*")) == written


def test_a_cache_directory_that_cannot_be_made_is_one_line_before_any_step(tiny_runs, tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    refused = tiny_runs.run(
        *tiny_runs.train_args(tmp_path / "r", 1), f"--compile_cache={blocker}/x"
    )
    assert refused.returncode != 0
    assert (
        refused.stderr.strip()
        .splitlines()[-1]
        .startswith(f"error: cannot create the compile cache directory {blocker}/x")
    )
    assert not (tmp_path / "r" / "checkpoint_1").exists()


def test_an_empty_compile_cache_flag_turns_the_cache_off(tiny_runs, tmp_path):
    home = tmp_path / "home"  # where the default cache (~/.cache/t5forge/jax) would go
    env = tiny_runs.env(HOME=home)
    for name in ("T5FORGE_COMPILE_CACHE", "JAX_COMPILATION_CACHE_DIR"):  # the default is home's
        env.pop(name, None)
    run = tiny_runs.train(tmp_path / "r", 1, "--compile_cache=", env=env, check=True)
    assert (tmp_path / "r" / "checkpoint_1").exists(), run.stderr[-2000:]
    assert not (home / ".cache").exists()


SWITCHES = """
import sys
from pathlib import Path
import jax, jax.numpy as jnp
from t5forge import compile_cache
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
directory = Path(sys.argv[1])
def entries():
    return len(list(directory.glob("*-cache")))
written = []
for turn, setting in enumerate([str(directory), "", str(directory)]):
    compile_cache.use(setting)
    jax.jit(lambda x, turn=turn: x * (turn + 2)).lower(jnp.ones(3)).compile()
    written.append(entries())
print(written)
"""


def test_the_cache_turns_off_and_on_again_in_one_process(tmp_path):
    """JAX decides once per process whether its cache is used; `use` takes effect anyway (a
    server in a process that trained turns it off, a later run turns it on)."""
    result = subprocess.run(
        [sys.executable, "-c", SWITCHES, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    on, off, on_again = json.loads(result.stdout)  # entries after each turn
    assert 0 < on == off < on_again, result.stdout + result.stderr
