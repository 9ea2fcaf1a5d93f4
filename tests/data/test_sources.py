"""Sources: real JSONL files, globs, TSV/text lines, Hugging Face files and streaming, functions."""

import gzip
import json
import pickle

import pytest

from t5forge.data import (
    DataSource,
    FunctionSource,
    HuggingFaceSource,
    JsonLinesSource,
    TextLineSource,
    TsvSource,
)
from t5forge.data.sources import is_random_access
from t5forge.errors import DataError


@pytest.fixture(scope="module")
def rotten(shared_data):
    folder = shared_data / "rotten_tomatoes"
    return JsonLinesSource({s: str(folder / f"{s}.jsonl.gz") for s in ("train", "validation")})


def test_jsonl_source_reads_real_splits(rotten, shared_data):
    assert isinstance(rotten, DataSource)
    assert rotten.split_names == ("train", "validation")
    assert rotten.num_examples("train") == 10752
    assert rotten.num_examples("validation") == 1000
    validation = rotten.split("validation")
    first = json.loads(
        gzip.open(shared_data / "rotten_tomatoes/validation.jsonl.gz", "rt").readline()
    )
    assert is_random_access(validation) and validation[0] == first
    assert set(validation[999]) == {"text", "label"}


def test_split_pickles_without_rows_and_reloads(rotten):
    split = rotten.split("validation")
    len(split)
    payload = pickle.dumps(split)
    assert len(payload) < 2000
    assert pickle.loads(payload)[5] == split[5]


def test_glob_expands_sorted(tmp_path):
    for i in (2, 1):
        (tmp_path / f"part-{i}.jsonl").write_text(json.dumps({"x": i}) + "\n")
    source = JsonLinesSource({"train": str(tmp_path / "part-*.jsonl")})
    assert [source.split("train")[i]["x"] for i in range(2)] == [1, 2]


def test_missing_file_names_the_glob(tmp_path):
    source = JsonLinesSource({"train": str(tmp_path / "nothing-*.jsonl")})
    with pytest.raises(DataError, match=r"no file matches '.*nothing-\*\.jsonl' \(split 'train'\)"):
        source.num_examples("train")


def test_malformed_json_line_names_file_and_line(tmp_path):
    path = tmp_path / "bad.jsonl.gz"
    with gzip.open(path, "wt") as f:
        f.write('{"a": 1}\n{"a": 2}\n{"a": \n')
    with pytest.raises(DataError, match=r"bad\.jsonl\.gz:3: malformed JSON") as e:
        JsonLinesSource({"train": str(path)}).num_examples("train")
    assert "\n" not in str(e.value)


def test_unknown_split_lists_splits(rotten):
    with pytest.raises(DataError, match=r"no split 'test'; available splits: train, validation"):
        rotten.split("test")


def test_tsv_and_text_lines(tmp_path):
    (tmp_path / "pairs.tsv").write_text("hello\thallo\ncat\tKatze\n")
    tsv = TsvSource({"train": str(tmp_path / "pairs.tsv")})
    assert tsv.split("train")[1] == {"inputs": "cat", "targets": "Katze"}
    (tmp_path / "bad.tsv").write_text("one\ttwo\nonly-one\n")
    with pytest.raises(DataError, match=r"bad.tsv:2: expected 2 tab-separated fields"):
        TsvSource({"train": str(tmp_path / "bad.tsv")}).num_examples("train")
    (tmp_path / "lines.txt").write_text("first line\n\nsecond line\n")
    lines = TextLineSource({"train": str(tmp_path / "lines.txt")})
    assert [lines.split("train")[i] for i in range(2)] == [
        {"text": "first line"},
        {"text": "second line"},
    ]


def test_huggingface_local_files_and_streaming(shared_data, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf"))
    files = {"validation": str(shared_data / "rotten_tomatoes/validation.jsonl.gz")}
    source = HuggingFaceSource(data_files=files)
    assert source.split_names == ("validation",)
    assert source.num_examples("validation") == 1000
    eager_first = source.split("validation")[0]
    streaming = HuggingFaceSource(data_files=files, streaming=True)
    split = streaming.split("validation")
    assert not is_random_access(split)
    assert next(iter(split)) == eager_first
    csv_path = tmp_path / "rows.csv"
    csv_path.write_text("text,label\ngood film,fresh\nbad film,rotten\n")
    csv_source = HuggingFaceSource(data_files={"train": str(csv_path)})
    assert csv_source.split("train")[1] == {"text": "bad film", "label": "rotten"}


def _three_rows(split):
    return [{"text": f"{split} {i}"} for i in range(3)]


def _generated_rows(split):
    return ({"text": f"{split} {i}"} for i in range(4))


def test_function_sources():
    listed = FunctionSource(_three_rows, splits=["train"])
    assert listed.num_examples("train") == 3 and listed.split("train")[2] == {"text": "train 2"}
    generated = FunctionSource(_generated_rows, splits=["train"])
    assert generated.num_examples("train") is None
    assert [r["text"] for r in generated.split("train")] == [f"train {i}" for i in range(4)]
    assert FunctionSource(_generated_rows, ["train"], {"train": 4}).num_examples("train") == 4
