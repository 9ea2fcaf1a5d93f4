"""The TFRecord reader against files TensorFlow's own TFRecordWriter wrote
(tests/data/tfds_fixtures/tfexample): every checksum checks, every tf.Example parses, and a
damaged file is one line naming the file and the byte offset of the damaged record."""

import struct

import numpy as np
import pytest

from t5forge.data.tf_formats.example import parse_example
from t5forge.data.tf_formats.record_dataset import tfrecord_dataset
from t5forge.data.tf_formats.records import masked_crc32c, read_records
from t5forge.errors import DataError
from tests.data.tf_reference import FIXTURES

WRITTEN_BY_TF = FIXTURES / "tfexample" / "reviews-00000-of-00002.tfrecord"


def test_masked_crc32c_is_the_checksum_tensorflow_wrote():
    head = WRITTEN_BY_TF.read_bytes()[:12]
    (stored,) = struct.unpack("<I", head[8:12])
    assert masked_crc32c(head[:8]) == stored


def test_reads_every_record_tensorflow_wrote_and_parses_its_examples():
    records = list(read_records(WRITTEN_BY_TF))
    assert len(records) == 20
    example = parse_example(records[3], "record 3")
    assert example["index"].tolist() == [3] and example["ids"].dtype == np.int64
    assert example["ids"].tolist() == [0, 1, 2]
    assert example["scores"].dtype == np.float32
    np.testing.assert_array_equal(example["scores"], np.float32([1.0, -3 / 7]))
    assert example["targets"] in ([b"fresh"], [b"rotten"])
    empty = parse_example(records[0], "record 0")["ids"]
    assert empty.dtype == np.int64 and empty.size == 0


def _record_offsets(data: bytes) -> list[int]:
    offsets, offset = [], 0
    while offset < len(data):
        offsets.append(offset)
        offset += 16 + struct.unpack("<Q", data[offset : offset + 8])[0]
    return offsets


def _flip(data: bytes, position: int) -> bytes:
    return data[:position] + bytes([data[position] ^ 0x40]) + data[position + 1 :]


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda d, at: _flip(d, at + 20), "byte {at}: the record data's checksum does not match"),
        (lambda d, at: _flip(d, at + 2), "byte {at}: the record length's checksum does not match"),
        (lambda d, at: d[: at + 30], r"byte {at}: the file ends inside a record of \d+ bytes"),
        (lambda d, at: d[: at + 5], "byte {at}: the file ends inside a record's length header"),
    ],
)
def test_damage_is_one_line_naming_file_and_offset(tmp_path, damage, message):
    data = WRITTEN_BY_TF.read_bytes()
    at = _record_offsets(data)[5]
    damaged = tmp_path / "damaged.tfrecord"
    damaged.write_bytes(damage(data, at))
    records = read_records(damaged)
    for _ in range(5):
        next(records)
    with pytest.raises(DataError, match=f"{damaged}: damaged TFRecord at {message.format(at=at)}"):
        next(records)


def test_missing_file_and_non_example_records_are_one_line(tmp_path):
    with pytest.raises(DataError, match="no such TFRecord file"):
        list(read_records(tmp_path / "absent.tfrecord"))
    with pytest.raises(DataError, match="where: not a tf.train.Example"):
        parse_example(b"\x0a\x05\x0a\x03\x0a\x01", "where")


def test_tfrecord_dataset_over_several_files_reads_them_as_tf_data_does():
    """One file after the other; with num_parallel_reads, one record from each in turn
    (tf.data's deterministic parallel interleave, block length 1)."""
    files = sorted(WRITTEN_BY_TF.parent.glob("reviews-*.tfrecord"))
    first, second = (list(read_records(path)) for path in files)
    assert list(tfrecord_dataset(files)) == first + second
    interleaved = [record for pair in zip(first, second) for record in pair]
    assert list(tfrecord_dataset(files, num_parallel_reads=2)) == interleaved
