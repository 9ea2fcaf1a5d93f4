"""Inputs that are not what they seem: text in UTF-16 or holding NUL bytes, a truncated
Hugging Face weights file, a lone surrogate given to the Python API, output under an ASCII
locale. Each is refused in one line naming the file (and line) and the fix, and nothing is
written from it; or, for the locale, works."""

from __future__ import annotations

import gzip
import os
import shutil

import pytest
from commands import TASK

import t5forge
from t5forge.errors import CheckpointError, DataError

from .conftest import error_line, in_process, one_error, preview_tsv_train

TEXT = "Click the button.\tKlicken Sie auf die Schaltfläche.\nSave the file.\tDatei speichern.\n"
ENCODINGS = {  # how the file is stored -> what the error line must say
    "utf-16-le without BOM": (lambda t: t.encode("utf-16-le"), "NUL byte", "UTF-16"),
    "utf-16-be without BOM": (lambda t: t.encode("utf-16-be"), "NUL byte", "UTF-16"),
    "utf-16 with BOM": (lambda t: t.encode("utf-16"), "NUL byte", "UTF-16"),
    "a NUL byte in a line": (
        lambda t: t.encode().replace(b"file.", b"fi\x00le."),
        ":2: a NUL byte at column",
        "remove the NULs",
    ),
}
FORMATS = {  # file name -> how the bytes are stored in it
    "corpus.txt": lambda data: data,
    "corpus.tsv": lambda data: data,
    "corpus.txt.gz": gzip.compress,
}


@pytest.mark.parametrize("file_name", sorted(FORMATS))
@pytest.mark.parametrize("encoding", sorted(ENCODINGS))
def test_text_that_is_not_utf8_is_refused_by_name(capsys, tmp_path, encoding, file_name):
    encode, problem, fix = ENCODINGS[encoding]
    corpus = tmp_path / file_name
    corpus.write_bytes(FORMATS[file_name](encode(TEXT)))
    output = tmp_path / "spiece.model"
    line = one_error(
        *in_process(
            capsys, "vocab", "train", "--input", corpus, "--vocab_size", "30", "--output", output
        )
    )
    assert f"{corpus}:" in line and problem in line and fix in line, line
    assert not output.exists()


TSV_TASK_FAULTS = {
    "utf-16-le without BOM": (TEXT.encode("utf-16-le"), "train.tsv:1: a NUL byte"),
    "a NUL byte in a row": (TEXT.encode().replace(b"Save", b"Sa\x00ve"), "train.tsv:2: a NUL"),
}


@pytest.mark.parametrize("fault", sorted(TSV_TASK_FAULTS))
def test_a_task_reading_utf16_or_nul_text_is_one_line(faults, tsv_task, fault):
    content, expected = TSV_TASK_FAULTS[fault]
    (tsv_task / "train.tsv").write_bytes(content)
    result = preview_tsv_train(faults, tsv_task)
    assert f"{tsv_task}/{expected}" in error_line(result)


@pytest.fixture(scope="module")
def loaded(trained):
    return t5forge.load(trained / "checkpoint_12")


SURROGATES = {
    "generate": lambda model: model.generate(["abc \ud800"], max_length=2),
    "generate, second text": lambda model: model.generate(["fine", "x\udfffy"], max_length=2),
    "score inputs": lambda model: model.score(["abc \ud800"], ["abc"]),
    "score targets": lambda model: model.score(["abc"], ["\udc80 abc"]),
}


@pytest.mark.parametrize("call", sorted(SURROGATES))
def test_a_lone_surrogate_is_one_data_error(loaded, call):
    with pytest.raises(DataError, match="lone surrogate") as raised:
        SURROGATES[call](loaded)
    assert len(str(raised.value).splitlines()) == 1


@pytest.fixture(scope="module")
def hf_dir(trained, tmp_path_factory):
    """The trained checkpoint exported to a Hugging Face directory, once."""
    folder = tmp_path_factory.mktemp("hf") / "model"
    t5forge.convert(trained / "checkpoint_12", folder, from_="t5forge", to="hf")
    return folder


SAFETENSORS_DAMAGE = {
    "truncated to half": lambda data: data[: len(data) // 2],
    "truncated inside the header": lambda data: data[:20],
    "empty": lambda data: b"",
    "header length past the end": lambda data: (1 << 40).to_bytes(8, "little") + data[8:],
}


@pytest.mark.parametrize("damage", sorted(SAFETENSORS_DAMAGE))
def test_a_damaged_model_safetensors_is_one_line(capsys, hf_dir, tmp_path, damage):
    copy = shutil.copytree(hf_dir, tmp_path / "hf")
    weights = copy / "model.safetensors"
    weights.write_bytes(SAFETENSORS_DAMAGE[damage](weights.read_bytes()))
    with pytest.raises(CheckpointError, match="not a readable safetensors file"):
        t5forge.load(copy)
    output = tmp_path / "out"
    line = one_error(
        *in_process(
            capsys,
            "convert",
            "--from",
            "hf",
            "--to",
            "t5forge",
            "--input",
            copy,
            "--output",
            output,
        )
    )
    assert f"{weights} is not a readable safetensors file" in line and "again" in line, line
    assert not output.exists()


ASCII_LOCALE = {"LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}


def test_output_under_an_ascii_locale_is_escaped_not_a_crash(faults):
    """German examples printed where stdout takes ASCII only: escaped, exit 0."""
    result = faults.run(
        "tasks", "preview", TASK, "--split", "validation", "-n", "3", env=faults.env(**ASCII_LOCALE)
    )
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert "\\x" in result.stdout and result.stdout.isascii()


def test_an_error_naming_a_non_ascii_path_under_an_ascii_locale_is_one_line(faults, tmp_path):
    missing = tmp_path / "données"
    os.makedirs(missing)
    result = faults.run("checkpoint", "verify", missing, env=faults.env(**ASCII_LOCALE))
    assert "no t5forge checkpoint" in error_line(result)
