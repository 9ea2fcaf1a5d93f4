"""Paths of the wrong type: a file where a directory belongs, a directory where a file does, or
a path under a file, for every input and output a command names. Each is one line from
`storage.require_kind` naming the role and the path, before anything is written. In-process:
the check comes before any model is built."""

from __future__ import annotations

import pytest
from commands import TASK

from .conftest import in_process, one_error, preview_tsv_train


def _file(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("not a directory\n")
    return path


def _directory(path):
    path.mkdir(parents=True)
    return path


WRONG = {  # how the path is spoiled -> (make it, the words the line must hold)
    "a file": (_file, "is a file, not a directory"),
    "under a file": (lambda path: _file(path.parent) and path, "lies under"),
}


@pytest.fixture
def tiny_env(faults, monkeypatch):
    for name, value in faults.env().items():
        if name.startswith("T5FORGE_"):
            monkeypatch.setenv(name, str(value))
    return faults


def _command(faults, trained, command, output):
    """`command` of the tiny model writing `output` (MODEL_DIR or the output dir)."""
    common = [
        f"--gin_file={faults.gin}",
        "--gin.DROPOUT_RATE=0.0",
        f"--gin.MIXTURE_OR_TASK_NAME={TASK}",
        "--gin.TASK_FEATURE_LENGTHS={'inputs': 32, 'targets': 8}",
    ]
    if command == "train":
        return faults.train_args(output, 2)
    binding = {"infer": "INFER_OUTPUT_DIR", "eval": "EVAL_OUTPUT_DIR"}[command]
    return [
        command,
        *common,
        f"--gin_file=runs/{command}.gin",
        f"--gin.CHECKPOINT_PATH={trained / 'checkpoint_12'}",
        f"--gin.{binding}={output}",
    ]


ROLES = {"train": "MODEL_DIR", "infer": "INFER_OUTPUT_DIR", "eval": "EVAL_OUTPUT_DIR"}


@pytest.mark.parametrize("wrong", sorted(WRONG))
@pytest.mark.parametrize("command", sorted(ROLES))
def test_an_output_directory_of_the_wrong_type(capsys, tiny_env, trained, tmp_path, command, wrong):
    make, words = WRONG[wrong]
    output = make(tmp_path / "spoilt" / "out")
    before = sorted(p.name for p in tmp_path.rglob("*"))
    line = one_error(*in_process(capsys, *_command(tiny_env, trained, command, output)))
    assert f"{ROLES[command]} {output}" in line and words in line, line
    assert sorted(p.name for p in tmp_path.rglob("*")) == before


FILES_IN_MODEL_DIR = {  # a file train writes, made a directory -> its role in the line
    "metrics.jsonl": "MODEL_DIR's metrics file",
    "train.lock": "the lock",
}


@pytest.mark.parametrize("name", sorted(FILES_IN_MODEL_DIR))
def test_a_directory_where_train_writes_a_file(capsys, tiny_env, tmp_path, name):
    _directory(tmp_path / "run" / name)
    line = one_error(*in_process(capsys, *tiny_env.train_args(tmp_path / "run", 2)))
    assert f"{FILES_IN_MODEL_DIR[name]} {tmp_path / 'run' / name} is a directory" in line, line
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == [name]


def test_a_directory_where_infer_writes_its_output_file(capsys, tiny_env, trained, tmp_path):
    output = tmp_path / "out"
    _directory(output / f"{TASK}-predict.jsonl")
    line = one_error(*in_process(capsys, *_command(tiny_env, trained, "infer", output)))
    assert f"the output {output / f'{TASK}-predict.jsonl'} is a directory" in line, line


def test_a_directory_where_eval_keeps_its_record(capsys, tiny_env, trained, tmp_path):
    output = tmp_path / "out"
    _directory(output / ".t5forge-eval.json")
    line = one_error(*in_process(capsys, *_command(tiny_env, trained, "eval", output)))
    assert "the evaluation record" in line and "is a directory" in line, line


@pytest.mark.parametrize("wrong", ["a directory", "under a file"])
def test_the_vocabulary_output_of_the_wrong_type(capsys, tmp_path, wrong):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("hello world\n" * 50)
    output = tmp_path / "vocab" / "spiece.model"
    if wrong == "a directory":
        _directory(output)
    else:
        _file(output.parent)
    args = ["vocab", "train", "--input", corpus, "--vocab_size", "30", "--output", output]
    line = one_error(*in_process(capsys, *args))
    assert f"the vocabulary output {output}" in line, line


@pytest.mark.parametrize("wrong", sorted(WRONG))
def test_the_convert_output_of_the_wrong_type(capsys, trained, tmp_path, wrong):
    make, words = WRONG[wrong]
    output = make(tmp_path / "spoilt" / "out")
    args = ["convert", "--from", "t5forge", "--to", "hf", "--input", trained / "checkpoint_12"]
    line = one_error(*in_process(capsys, *args, "--output", output))
    assert f"--output {output}" in line and words in line, line


@pytest.mark.parametrize("wrong", sorted(WRONG))
def test_the_cache_directory_of_the_wrong_type(capsys, tiny_env, tmp_path, wrong):
    make, words = WRONG[wrong]
    output = make(tmp_path / "spoilt" / "cache")
    args = ["cache-tasks", f"--tasks={TASK}", "--splits=validation"]
    line = one_error(*in_process(capsys, *args, f"--output_cache_dir={output}"))
    assert f"--output_cache_dir {output}" in line and words in line, line


def test_a_data_file_that_is_a_directory(faults, tsv_task):
    (tsv_task / "train.tsv").unlink()
    _directory(tsv_task / "train.tsv")
    result = preview_tsv_train(faults, tsv_task)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert f"the train data file {tsv_task / 'train.tsv'} is a directory" in result.stderr
