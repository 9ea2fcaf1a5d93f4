"""TFExampleDataSource and FileDataSource give what SeqIO's give: the TFRecord files that
TensorFlow wrote, parsed with a SeqIO feature description, in SeqIO's interleaved order
(reference: tfds_fixtures/tfexample_reference.json, read by seqio itself)."""

import json

import numpy as np
import pytest

from t5forge.data import (
    ByteVocabulary,
    Feature,
    FileDataSource,
    TFExampleDataSource,
    get_mixture_or_task,
)
from t5forge.data.providers.tfexample_file_task import create_task_from_tfexample_file
from t5forge.data.sources.shard_info import ShardInfo
from t5forge.data.tf_formats import feature_specs as tf
from t5forge.errors import DataError
from tests.data.tf_reference import FIXTURES, assert_all_same, load_reference, untag

PATTERN = str(FIXTURES / "tfexample" / "reviews-*.tfrecord")
DESCRIPTION = {
    "inputs": tf.FixedLenFeature([], tf.string),
    "targets": tf.FixedLenFeature([], tf.string),
    "ids": tf.VarLenFeature(tf.int64),
    "scores": tf.FixedLenFeature([2], tf.float32),
    "index": tf.FixedLenFeature([], tf.int64),
    "missing": tf.FixedLenFeature([], tf.int64, default_value=-1),
}


def test_examples_equal_what_seqio_reads():
    expected = [untag(x) for x in load_reference("tfexample_reference.json")["seqio_train"]]
    source = TFExampleDataSource({"train": PATTERN}, feature_description=DESCRIPTION)
    ours = list(source.split("train"))
    assert_all_same(ours, expected, "TFExampleDataSource train")
    assert isinstance(ours[0]["inputs"], str)
    read = source.get_dataset("train", shuffle=False)
    assert_all_same(list(read), expected, "TFExampleDataSource.get_dataset")


def test_hosts_read_whole_files_and_shuffle_reorders_files_only():
    source = TFExampleDataSource({"train": PATTERN}, feature_description=DESCRIPTION)
    hosts = [
        [
            int(x["index"])
            for x in source.get_dataset("train", shuffle=False, shard_info=ShardInfo(h, 2))
        ]
        for h in range(2)
    ]
    assert hosts == [list(range(20)), list(range(20, 40))]
    orders = {
        tuple(int(x["index"]) for x in source.get_dataset("train", shuffle=True, seed=seed))
        for seed in range(6)
    }
    assert len(orders) == 2 and all(sorted(order) == list(range(40)) for order in orders)


def test_fixed_len_sequence_feature():
    source = TFExampleDataSource(
        {"train": PATTERN},
        {
            "scores": tf.FixedLenSequenceFeature([2], tf.float32),
            "ids": tf.FixedLenSequenceFeature([], tf.int64),
        },
    )
    first = next(iter(source.split("train")))
    assert first["scores"].shape == (1, 2) and first["ids"].shape == (0,)


@pytest.mark.parametrize(
    ("description", "message"),
    [
        (
            {"nope": tf.FixedLenFeature([], tf.string)},
            r"reviews-00000-of-00002.tfrecord record 0: no feature 'nope'",
        ),
        ({"index": tf.FixedLenFeature([], tf.string)}, "holds numbers, described as tf.string"),
        ({"inputs": tf.FixedLenFeature([], tf.int64)}, "holds bytes, described as tf.int64"),
        (
            {"scores": tf.FixedLenFeature([3], tf.float32)},
            r"has 2 values where its FixedLenFeature shape \[3\] needs 3",
        ),
    ],
)
def test_examples_that_do_not_fit_the_description_are_one_line(description, message):
    source = TFExampleDataSource({"train": PATTERN}, description)
    with pytest.raises(DataError, match=message) as error:
        list(source.split("train"))
    assert "\n" not in str(error.value)


def test_bad_descriptions_and_patterns_are_refused_before_reading(tmp_path):
    with pytest.raises(DataError, match="tf.string, tf.int64 or tf.float32"):
        TFExampleDataSource({"train": PATTERN}, {"x": tf.FixedLenFeature([], tf.int32)})
    with pytest.raises(DataError, match="use tf.io.FixedLenFeature"):
        TFExampleDataSource({"train": PATTERN}, {"x": ([], tf.string)})
    source = TFExampleDataSource({"train": str(tmp_path / "*.tfrecord")}, DESCRIPTION)
    with pytest.raises(DataError, match="no file matches"):
        source.split("train")


def _read_json_lines(path):
    with open(path, encoding="utf-8") as f:
        yield from (json.loads(line) for line in f)


def test_file_data_source_reads_files_with_a_python_function_in_seqio_order(tmp_path):
    for part in range(2):
        rows = [{"n": part * 20 + i} for i in range(20)]
        (tmp_path / f"part-{part}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    source = FileDataSource(
        _read_json_lines,
        {"train": str(tmp_path / "part-*.jsonl")},
        num_input_examples={"train": 40},
    )
    order = [row["n"] for row in source.split("train")]
    # tf.data's interleave with cycle 16, block 16, as SeqIO reads files (and as TensorFlow
    # read the tf.Example files above).
    assert order == [*range(16), *range(20, 36), *range(16, 20), *range(36, 40)]
    assert source.num_input_examples("train") == 40 and source.list_shards("train")[0].endswith(
        "part-0.jsonl"
    )
    assert np.array_equal(
        [
            row["n"]
            for row in FileDataSource(
                _read_json_lines, {"t": str(tmp_path / "*.jsonl")}, block_length=1
            ).split("t")
        ][:4],
        [0, 20, 1, 21],
    )


def test_t5x_create_task_from_tfexample_file_tokenizes_the_inputs_with_eos():
    vocabulary = ByteVocabulary()
    name = create_task_from_tfexample_file(
        [PATTERN],
        "tfrecord",
        "inputs",
        "targets",
        {
            "inputs": Feature(vocabulary),
            "targets": Feature(vocabulary),
        },
    )
    # The same paths and keys name the same task, registered anew.
    assert name == create_task_from_tfexample_file(
        [PATTERN], "tfrecord", "inputs", "targets", {"inputs": Feature(vocabulary)}
    )
    first_seqio = untag(load_reference("tfexample_reference.json")["seqio_train"][0])
    example = next(iter(get_mixture_or_task(name).get_dataset("infer", shuffle=False)))
    text = first_seqio["inputs"].decode()
    assert example["inputs_pretokenized"] == text
    assert example["inputs"].tolist() == [*vocabulary.encode(text), vocabulary.eos_id]
    with pytest.raises(DataError, match="'sstable' are internal formats"):
        create_task_from_tfexample_file([PATTERN], "sstable", "inputs", None, {})
