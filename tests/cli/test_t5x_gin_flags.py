"""Every absl flag of T5X's t5x/train.py, eval.py and infer.py (at cc342d4) parses under the
same t5forge command, with T5X's meaning or a one-line refusal."""

from __future__ import annotations

import os

import pytest

from t5forge.cli import run_flags
from t5forge.data.cache import search_dirs as cache_dirs
from t5forge.errors import ConfigError
from t5forge.gin_config.gin_flags import split_gin_flags

# T5X's flags of each script (flags.DEFINE_* in t5x/{train,eval,infer}.py), with a value.
GIN = ["--gin_file=f.gin", "--gin_bindings=MODEL_DIR = '/tmp/m'", "--gin_search_paths=a,b"]
T5X_FLAGS = {
    "train": [
        *GIN,
        "--tfds_data_dir=/data/tfds",
        "--seqio_additional_cache_dirs=/c1,/c2",
        "--multiprocess_gpu",
        "--coordinator_address=10.0.0.1:1234",
        "--process_count=2",
        "--process_index=1",
        "--initialization_timeout=300",
    ],
    "eval": [*GIN, "--tfds_data_dir=/data/tfds"],
    "infer": [*GIN, "--tfds_data_dir=/data/tfds", "--shard_id=0"],
}


@pytest.fixture
def joined(monkeypatch):
    """The multi-host arguments a command would join with, in place of joining (and no
    process-wide cache dirs or TFDS_DATA_DIR left behind)."""
    calls = []
    monkeypatch.setattr(
        run_flags.partitioning, "initialize_distributed", lambda *args: calls.append(args)
    )
    monkeypatch.setattr(cache_dirs, "add_global_cache_dirs", lambda dirs: None)
    monkeypatch.delenv("TFDS_DATA_DIR", raising=False)
    return calls


@pytest.mark.parametrize("command", T5X_FLAGS)
def test_every_t5x_flag_of_the_command_parses(command, joined, monkeypatch):
    flags = split_gin_flags(T5X_FLAGS[command])
    assert flags.files == ["f.gin"] and flags.search_paths == ["a", "b"]
    assert flags.bindings == ["MODEL_DIR = '/tmp/m'"]
    monkeypatch.setattr(run_flags, "import_task_modules", lambda modules: None)
    run_flags.parse_common_flags(flags.rest, "", command)
    assert os.environ["TFDS_DATA_DIR"] == "/data/tfds"
    if command == "train":
        assert joined == [("10.0.0.1:1234", 2, 1, 300)]


def test_multiprocess_gpu_alone_lets_jax_detect_the_cluster(joined):
    run_flags.parse_common_flags(["--multiprocess_gpu"], "", "train")
    assert joined == [(None, None, None, None)]


def test_a_shard_other_than_the_first_is_refused_in_one_line():
    with pytest.raises(ConfigError, match=r"^--shard_id=3: t5forge runs inference as one job"):
        run_flags.parse_common_flags(["--shard_id=3"], "", "infer")
    with pytest.raises(ConfigError, match="unknown flag '--shard_id=0'"):
        run_flags.parse_common_flags(["--shard_id=0"], "", "train")  # T5X's train has none
