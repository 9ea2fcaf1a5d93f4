"""Inputs and outputs on an S3 protocol server (moto on loopback), as a user keeps them in a bucket:
data files and globs, vocabularies, gin files and their includes, evaluation and inference output.
Failures an operator meets (no bucket, no credentials, a store that does not answer) are one line.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import socket
from pathlib import Path

import pytest
from commands import command_env, t5forge

from t5forge import storage
from t5forge.data import JsonLinesSource, SentencePieceVocabulary
from t5forge.data.vocab_trainer import file_texts, train_vocabulary
from t5forge.errors import DataError, StorageError

REPO = Path(__file__).resolve().parents[2]
EN_DE = REPO / "t5forge" / "tasks" / "data" / "en_de_lohelp"
TASK = "en_de_lohelp_translate"


def _upload(local: Path, url: str) -> str:
    storage.path(url).parent.mkdir(parents=True, exist_ok=True)
    storage.path(url).write_bytes(local.read_bytes())
    return url


def test_globs_and_gzipped_json_lines_read_from_a_bucket_as_from_disk(bucket):
    for split in ("train", "validation"):
        _upload(EN_DE / f"{split}.jsonl.gz", f"{bucket}/data/en_de/{split}.jsonl.gz")
    assert storage.glob(f"{bucket}/data/*/*.jsonl.gz") == [
        f"{bucket}/data/en_de/train.jsonl.gz",
        f"{bucket}/data/en_de/validation.jsonl.gz",
    ]
    assert storage.glob(f"{bucket}/data/en_de/train.jsonl.gz") == [
        f"{bucket}/data/en_de/train.jsonl.gz"
    ]
    remote = JsonLinesSource({"validation": f"{bucket}/data/*/valid*.jsonl.gz"})
    local = JsonLinesSource({"validation": str(EN_DE / "validation.jsonl.gz")})
    assert list(remote.split("validation")) == list(local.split("validation"))
    with pytest.raises(DataError, match="no file matches"):
        JsonLinesSource({"train": f"{bucket}/data/*/missing*.jsonl"}).split("train")


def test_truncated_gzip_in_a_bucket_names_the_object(bucket):
    whole = gzip.compress(b"".join(b'{"text": "row %d"}\n' % i for i in range(2000)))
    storage.path(f"{bucket}/bad.jsonl.gz").write_bytes(whole[: len(whole) // 2])
    with pytest.raises(DataError, match=rf"{bucket}/bad.jsonl.gz: the gzip data is truncated"):
        list(JsonLinesSource({"train": f"{bucket}/bad.jsonl.gz"}).split("train"))


def test_vocabulary_trained_into_and_loaded_from_a_bucket(bucket, tmp_path):
    texts = [t for i, t in enumerate(file_texts([str(EN_DE / "train.jsonl.gz")], "en")) if i < 500]
    url = f"{bucket}/vocab/spiece.model"
    train_vocabulary(texts, url, vocab_size=300, extra_ids=10, progress=False)
    local = tmp_path / "spiece.model"
    local.write_bytes(storage.path(url).read_bytes())
    remote, on_disk = SentencePieceVocabulary(url, 10), SentencePieceVocabulary(local, 10)
    sentence = "Click the Save button <extra_id_0>."
    assert remote.encode(sentence) == on_disk.encode(sentence)
    assert remote.vocab_size == on_disk.vocab_size
    with pytest.raises(DataError, match="cannot read vocabulary file"):
        SentencePieceVocabulary(f"{bucket}/vocab/missing.model")


@pytest.mark.slow
def test_train_eval_infer_read_and_write_a_bucket(
    bucket, s3_env, tiny_vocab, tiny_model_gin, tmp_path
):
    """Vocabulary, data and gin files (one included from a bucket search path) on S3; evaluation
    and inference output written back there."""
    vocab = _upload(tiny_vocab, f"{bucket}/vocab/spiece.model")
    for split in ("train", "validation"):
        _upload(EN_DE / f"{split}.jsonl.gz", f"{bucket}/data/en_de_lohelp/{split}.jsonl.gz")
    storage.path(f"{bucket}/configs/shapes/tiny.gin").write_text(tiny_model_gin.read_text())
    storage.path(f"{bucket}/configs/model.gin").write_text(
        "include 'shapes/tiny.gin'\nT5Config.dropout_rate = 0.0\n"
    )
    env = command_env(T5FORGE_VOCAB=vocab, T5FORGE_DATA_DIR=f"{bucket}/data")  # and s3_env's
    common = [
        f"--gin_search_paths={bucket}/configs",
        f"--gin_file={bucket}/configs/model.gin",
        f"--gin.MIXTURE_OR_TASK_NAME={TASK}",
        "--gin.TASK_FEATURE_LENGTHS={'inputs': 24, 'targets': 24}",
    ]
    model_dir = tmp_path / "run"
    t5forge(
        "train",
        *common,
        "--gin_file=runs/finetune.gin",
        f"--gin.MODEL_DIR={model_dir}",
        "--gin.TRAIN_STEPS=2",
        "--gin.BATCH_SIZE=4",
        "--gin.INITIAL_CHECKPOINT_PATH=None",
        "--gin.EVAL_PERIOD=0",
        env=env,
        timeout=300,
        check=True,
    )
    assert "T5Config.emb_dim = 32" in (model_dir / "config.gin").read_text()  # the include

    t5forge(
        "infer",
        *common,
        "--gin_file=runs/infer.gin",
        f"--gin.CHECKPOINT_PATH={model_dir / 'checkpoint_2'}",
        f"--gin.INFER_OUTPUT_DIR={bucket}/infer",
        "--gin.infer.mode='score'",
        env=env,
        timeout=300,
        check=True,
    )
    rows = storage.path(f"{bucket}/infer/{TASK}-score.jsonl").read_text().splitlines()
    with gzip.open(EN_DE / "validation.jsonl.gz", "rt") as validation:
        assert len(rows) == sum(1 for _ in validation)
    assert all(json.loads(row)["score"] < 0 for row in rows)

    t5forge(
        "eval",
        *common,
        "--gin_file=runs/eval.gin",
        f"--gin.CHECKPOINT_PATH={model_dir / 'checkpoint_2'}",
        f"--gin.EVAL_OUTPUT_DIR={bucket}/eval",
        env=env,
        timeout=300,
        check=True,
    )
    (metrics,) = storage.path(f"{bucket}/eval/{TASK}-metrics.jsonl").read_text().splitlines()
    assert json.loads(metrics)["step"] == 2 and "bleu" in json.loads(metrics)["metrics"]


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.parametrize(
    "case, expected",
    [
        ("no bucket", "no file matches"),
        ("no credentials", "no credentials for the object store"),
        ("no answer", "the object store did not answer"),
    ],
)
def test_storage_failures_are_one_line(case, expected, bucket, s3_env, tiny_vocab):
    env, vocab_path = command_env(), str(tiny_vocab)  # with s3_env's settings
    data = f"{bucket}/data"
    if case == "no bucket":
        data = "s3://t5forge-no-such-bucket/data"
    elif case == "no credentials":
        del env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"]
    else:
        env["AWS_ENDPOINT_URL"] = f"http://127.0.0.1:{_closed_port()}"
    env["T5FORGE_DATA_DIR"] = data
    result = t5forge(
        "tasks", "preview", TASK, "--vocab", vocab_path, "-n", "1", env=env, timeout=300
    )
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr[-2000:]
    assert lines[0].startswith("error: ") and expected in lines[0], lines[0]
    assert "Traceback" not in result.stderr


def test_storage_errors_name_the_fix_for_a_missing_backend():
    if importlib.util.find_spec("gcsfs") is not None:
        pytest.skip("gcsfs is installed here, so gs:// has its backend")
    with pytest.raises(StorageError, match=r"needs gcsfs .*t5forge\[cloud\]"):
        storage.glob("gs://some-bucket/data/*.jsonl")
