"""Bad data, vocabularies and configurations: one `error:` line naming the file (and line) or
the binding, exit status 2, before any training happens."""

from __future__ import annotations

import gzip
import json
import shutil

import pytest
from commands import REPO, TASK, xla_flags

from .conftest import ROWS, TSV_ROWS, error_line, preview_tsv_train


def _jsonl(rows) -> bytes:
    return b"".join(json.dumps(row).encode() + b"\n" for row in rows)


def _numbered_text(lines: int) -> bytes:
    """Text that compresses poorly enough for a cut to land inside the gzip stream."""
    return "".join(f"line {i} holds {i * 7919 % 104729}\n" for i in range(lines)).encode()


BAD_FILES = {  # what train.jsonl.gz holds -> what the error line must name
    "non-UTF-8 byte": (
        gzip.compress(_jsonl(ROWS[:2]) + b'{"en": "caf\xe9", "de": "x"}\n'),
        "train.jsonl.gz:3: not UTF-8",
    ),
    "truncated gzip": (
        gzip.compress(
            _jsonl({"en": line, "de": line} for line in _numbered_text(2000).decode().splitlines())
        )[:4000],
        "train.jsonl.gz: the gzip data",
    ),
    "not gzip at all": (_jsonl(ROWS), "train.jsonl.gz: the gzip data"),
    "missing field": (
        gzip.compress(_jsonl(ROWS[:2]) + b'{"en": "only english"}\n'),
        "train.jsonl.gz:3: no field de",
    ),
    "malformed JSON": (
        gzip.compress(_jsonl(ROWS[:1]) + b'{"en": "a", \n'),
        "train.jsonl.gz:2: malformed JSON",
    ),
    "JSON array row": (
        gzip.compress(_jsonl(ROWS[:1]) + b'["en", "de"]\n'),
        "train.jsonl.gz:2: expected a JSON object",
    ),
}


@pytest.fixture
def data_dir(tmp_path):
    """A T5FORGE_DATA_DIR whose en_de_lohelp dataset a case may spoil."""
    folder = tmp_path / "data" / "en_de_lohelp"
    shutil.copytree(REPO / "t5forge/tasks/data/en_de_lohelp", folder)
    return folder


@pytest.mark.parametrize("fault", sorted(BAD_FILES))
def test_bad_data_file_names_file_and_line(faults, data_dir, fault):
    content, expected = BAD_FILES[fault]
    (data_dir / "train.jsonl.gz").write_bytes(content)
    result = faults.run(
        "tasks",
        "preview",
        TASK,
        "--split",
        "train",
        "-n",
        "2",
        env=faults.env(T5FORGE_DATA_DIR=data_dir.parent),
    )
    line = error_line(result)
    assert expected in line and str(data_dir) in line, line


def test_missing_data_file_names_the_pattern(faults, data_dir):
    (data_dir / "train.jsonl.gz").unlink()
    result = faults.run(
        "tasks",
        "preview",
        TASK,
        "--split",
        "train",
        env=faults.env(T5FORGE_DATA_DIR=data_dir.parent),
    )
    assert "no file matches" in error_line(result)


@pytest.mark.slow
def test_training_on_a_file_with_a_missing_field_stops_before_the_first_step(
    faults, data_dir, tmp_path
):
    (data_dir / "train.jsonl.gz").write_bytes(BAD_FILES["missing field"][0])
    result = faults.train(tmp_path / "run", 5, env=faults.env(T5FORGE_DATA_DIR=data_dir.parent))
    assert "train.jsonl.gz:3: no field de" in error_line(result)
    assert not list((tmp_path / "run").glob("checkpoint_*"))


VOCAB_INPUTS = {
    "non-UTF-8 text file": ("corpus.txt", b"hello world\nna\xefve\n", "corpus.txt:2: not UTF-8"),
    "truncated gzip": (
        "corpus.txt.gz",
        gzip.compress(_numbered_text(2000))[:4000],
        "corpus.txt.gz: the gzip data",
    ),
    "missing JSON field": (
        "rows.jsonl",
        b'{"text": "a"}\n{"body": "b"}\n',
        "rows.jsonl:2: no field",
    ),
}


@pytest.mark.parametrize("fault", sorted(VOCAB_INPUTS))
def test_vocab_train_names_the_bad_input(faults, tmp_path, fault):
    name, content, expected = VOCAB_INPUTS[fault]
    (tmp_path / name).write_bytes(content)
    result = faults.run(
        "vocab",
        "train",
        "--input",
        tmp_path / name,
        "--vocab_size",
        "50",
        "--output",
        tmp_path / "spiece.model",
    )
    assert expected in error_line(result)
    assert not (tmp_path / "spiece.model").exists()


CONFIG_FAULTS = {  # extra train flags -> what the error line must say
    "unknown task": (["--gin.MIXTURE_OR_TASK_NAME=no_such_task"], "no_such_task"),
    "misspelt binding": (["--gin.train.total_stepz=5"], "total_stepz"),
    "unknown configurable": (["--gin.NoSuchThing.x=1"], "NoSuchThing"),
    "missing gin file": (["--gin_file=no/such/file.gin"], "no/such/file.gin"),
    "negative TRAIN_STEPS": (["--gin.TRAIN_STEPS=-3"], "TRAIN_STEPS"),
    "vocabulary larger than the model": (["--gin.T5Config.vocab_size=512"], "vocab_size"),
    "checkpoint period 0": (["--gin.CHECKPOINT_PERIOD=0"], "period"),
}


@pytest.mark.parametrize("fault", sorted(CONFIG_FAULTS))
def test_bad_configuration_is_one_line(faults, tmp_path, fault):
    flags, expected = CONFIG_FAULTS[fault]
    assert expected in error_line(faults.train(tmp_path / "run", 5, *flags))


GIN_VALUE_FAULTS = {  # binding -> (its value, what the error line must say after where)
    "TASK_FEATURE_LENGTHS a string": (
        "TASK_FEATURE_LENGTHS",
        "'abc'",
        "TASK_FEATURE_LENGTHS must be a dict of feature name",
    ),
    "TASK_FEATURE_LENGTHS an int": (
        "TASK_FEATURE_LENGTHS",
        "5",
        "TASK_FEATURE_LENGTHS must be a dict of feature name",
    ),
    "TASK_FEATURE_LENGTHS unclosed": (
        "TASK_FEATURE_LENGTHS",
        "{'inputs': 8",
        "malformed gin value",
    ),
    "BATCH_SIZE a word": ("BATCH_SIZE", "'eight'", "BATCH_SIZE must be an int >= 1"),
}


def _without(args: list[str], binding: str) -> list[str]:
    return [arg for arg in args if not arg.startswith(f"--gin.{binding}=")]


@pytest.mark.parametrize("fault", sorted(GIN_VALUE_FAULTS))
def test_a_bad_gin_value_on_the_command_line_is_one_line(faults, tmp_path, fault):
    binding, value, expected = GIN_VALUE_FAULTS[fault]
    line = error_line(faults.train(tmp_path / "run", 5, f"--gin.{binding}={value}"))
    assert line.startswith(f"error: --gin.{binding}={value}: ") and expected in line, line
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("fault", sorted(GIN_VALUE_FAULTS))
def test_a_bad_gin_value_in_a_file_names_file_and_line(faults, tmp_path, fault):
    binding, value, expected = GIN_VALUE_FAULTS[fault]
    gin_file = tmp_path / "mine.gin"
    gin_file.write_text(f"# my settings\nTRAIN_STEPS = 5\n{binding} = {value}\n")
    args = _without(faults.train_args(tmp_path / "run", 5), binding)
    line = error_line(faults.run(*args, f"--gin_file={gin_file}"))
    assert line.startswith(f"error: {gin_file}:3: ") and expected in line, line
    assert not (tmp_path / "run").exists()


def test_an_unused_binding_warns_and_the_run_goes_on(faults, tmp_path):
    result = faults.train(tmp_path / "run", 0, "--gin.BATCH_SIZ=4")
    assert result.returncode == 0, result.stderr[-3000:]
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert warnings == [
        "warning: --gin.BATCH_SIZ=4: not used by `t5forge train` (no "
        "configurable it calls reads it); remove it or fix its name"
    ]


def test_an_unused_binding_is_an_error_with_gin_strict(faults, tmp_path):
    line = error_line(faults.train(tmp_path / "run", 5, "--gin.infer.mode='score'", "--gin_strict"))
    assert line.startswith("error: --gin.infer.mode='score': not used by `t5forge train`"), line
    assert line.endswith("(--gin_strict)")
    assert not (tmp_path / "run").exists()


def test_missing_vocabulary_file_is_one_line(faults, tmp_path):
    result = faults.train(
        tmp_path / "run", 5, env=faults.env(T5FORGE_VOCAB=tmp_path / "none.model")
    )
    assert "none.model" in error_line(result)


def test_unknown_command_is_one_line(faults):
    assert "unknown command" in error_line(faults.run("trian"))


@pytest.mark.slow
def test_decoder_only_finetune_decodes_past_its_inputs_by_default(faults, tmp_path):
    """runs/finetune.gin as it ships, a decoder-only model: evaluation decodes inputs + targets."""
    result = faults.run(
        "train",
        "--gin_file=models/decoder_only/tiny.gin",
        f"--gin_file={faults.gin}",
        "--gin_file=runs/finetune.gin",
        "--gin.T5Config.num_encoder_layers=0",
        "--gin.T5Config.architecture='decoder_only'",
        f"--gin.MODEL_DIR={tmp_path / 'run'}",
        f"--gin.MIXTURE_OR_TASK_NAME={TASK}",
        "--gin.TASK_FEATURE_LENGTHS={'inputs': 16, 'targets': 8}",
        "--gin.TRAIN_STEPS=2",
        "--gin.BATCH_SIZE=4",
        "--gin.INITIAL_CHECKPOINT_PATH=None",
        "--gin.DROPOUT_RATE=0.0",
        "--gin.EVAL_PERIOD=2",
        "--gin.train.train_eval_dataset_cfg=None",
        "--gin.infer_eval/utils.DatasetConfig.batch_size=400",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert list((tmp_path / "run" / "inference_eval").glob("*predictions*"))


BAD_TSV_ROWS = {  # the row written as line 4 -> what the error line must say
    "no tab": ("Click button 9.\n", "train.tsv:4: expected 2 tab-separated fields"),
    "three fields": ("a\tb\tc\n", "train.tsv:4: expected 2 tab-separated fields"),
}


def _tsv_flags():
    return ["--module_import=user_tsv_tasks", "--gin.MIXTURE_OR_TASK_NAME='user_tsv'"]


@pytest.mark.parametrize("fault", sorted(BAD_TSV_ROWS))
def test_a_malformed_tsv_row_names_file_and_line(faults, tsv_task, fault):
    row, expected = BAD_TSV_ROWS[fault]
    (tsv_task / "train.tsv").write_text("".join(TSV_ROWS[:3] + [row] + TSV_ROWS[3:]))
    result = preview_tsv_train(faults, tsv_task)
    line = error_line(result)
    assert f"{tsv_task}/{expected}" in line, line


def test_training_on_a_malformed_tsv_row_stops_before_the_first_step(faults, tsv_task, tmp_path):
    (tsv_task / "train.tsv").write_text("".join(TSV_ROWS[:3] + ["no tab here\n"] + TSV_ROWS[3:]))
    env = faults.env(PYTHONPATH=tsv_task)
    result = faults.train(tmp_path / "run", 5, *_tsv_flags(), env=env)
    assert f"{tsv_task}/train.tsv:4: expected 2 tab-separated fields" in error_line(result)
    assert not list((tmp_path / "run").glob("checkpoint_*"))


def test_training_on_an_empty_split_is_one_line(faults, data_dir, tmp_path):
    (data_dir / "train.jsonl.gz").write_bytes(gzip.compress(b""))
    result = faults.train(tmp_path / "run", 5, env=faults.env(T5FORGE_DATA_DIR=data_dir.parent))
    assert f"task '{TASK}' split 'train' is empty" in error_line(result)
    assert not list((tmp_path / "run").glob("checkpoint_*"))


@pytest.mark.parametrize(
    "command, output_binding", [("infer", "INFER_OUTPUT_DIR"), ("eval", "EVAL_OUTPUT_DIR")]
)
def test_inferring_or_evaluating_an_empty_split_is_one_line(
    faults, tsv_task, trained, tmp_path, command, output_binding
):
    (tsv_task / "validation.tsv").write_text("\n\n")
    result = faults.run(
        command,
        f"--gin_file={faults.gin}",
        f"--gin_file=runs/{command}.gin",
        "--gin.DROPOUT_RATE=0.0",
        f"--gin.CHECKPOINT_PATH={trained / 'checkpoint_12'}",
        f"--gin.{output_binding}={tmp_path / 'out'}",
        *_tsv_flags(),
        "--gin.TASK_FEATURE_LENGTHS={'inputs': 32, 'targets': 8}",
        env=faults.env(PYTHONPATH=tsv_task),
    )
    assert "task 'user_tsv' split 'validation' is empty" in error_line(result)
    assert not list((tmp_path / "out").rglob("*.jsonl"))


@pytest.mark.parametrize("command", ["train", "infer", "eval"])
def test_an_unknown_flag_of_a_run_command_is_one_line(faults, command):
    line = error_line(faults.run(command, "--gin_file=runs/finetune.gin", "--gin_fil=mine.gin"))
    assert line == "error: unknown flag '--gin_fil=mine.gin'; see --help", line


@pytest.mark.parametrize(
    "args", [("tasks", "preview", TASK, "--bogus"), ("checkpoint", "verify", ".", "--bogus")]
)
def test_an_unknown_flag_of_another_command_is_argparse_usage_and_one_error(faults, args):
    """These commands parse with argparse: its usage lines, then `t5forge <command>: error:`."""
    result = faults.run(*args)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-2000:]
    errors = [line for line in result.stderr.splitlines() if ": error: " in line]
    assert errors == [f"t5forge {args[0]}: error: unrecognized arguments: --bogus"], errors


def test_a_batch_size_the_device_mesh_does_not_divide_is_one_line(faults, tmp_path):
    """Eight CPU devices (XLA's host-platform flag), a global batch of 6: refused before any
    step, naming the data-parallel size."""
    env = faults.env(XLA_FLAGS=xla_flags(8))
    line = error_line(faults.train(tmp_path / "run", 5, batch=6, env=env))
    assert "global batch size 6 is not divisible by the data-parallel size 8" in line, line
    assert not list((tmp_path / "run").glob("checkpoint_*"))
