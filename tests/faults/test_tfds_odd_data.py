"""TFDS directories and TFRecord files that are not what they seem: a dataset_info.json with a
malformed field, shards holding more or fewer records than it records, a data directory that
is a file, GZIP/ZLIB-compressed TFRecords and SeqIO's `reader_cls=functools.partial(
tf.data.TFRecordDataset, compression_type=...)` idiom. Each is read as TFDS/tf.data read it or
refused in one line naming the file (and field), through `t5forge tasks preview` and
`cache-tasks` as a user runs them. The data is TFDS's and TensorFlow's own
(tests/data/tfds_fixtures), changed with real framing: whole TFRecord frames, ArrayRecord's
writer, Python's gzip and zlib (what tf.data's GZIP and ZLIB options are)."""

from __future__ import annotations

import functools
import gzip
import json
import shutil
import zlib

import pytest
from array_record.python.array_record_module import ArrayRecordReader, ArrayRecordWriter
from commands import t5forge_in_process

from t5forge.compat import stand_in_modules
from t5forge.data import (
    ByteVocabulary,
    Feature,
    Task,
    TaskRegistry,
    TFExampleDataSource,
    preprocessors,
)
from t5forge.data.sources.tfds import TfdsDataSource, set_tfds_data_dir_override
from t5forge.data.tf_formats.records import read_records
from t5forge.errors import DataError
from tests.data.tf_reference import FIXTURES, tfrecord_frames

from .conftest import one_error

TASK = "odd_tfds_sst2"
SHARD = "glue-train.{}-00001-of-00003"
COMPRESS = {"GZIP": gzip.compress, "ZLIB": zlib.compress}
REVIEWS = sorted((FIXTURES / "tfexample").glob("reviews-*.tfrecord"))


@pytest.fixture
def register():
    """Registers the case's task over a source (removed again after the case, with any
    --tfds_data_dir override the command set)."""

    def add(source, feature: str = "sentence") -> None:
        TaskRegistry.remove(TASK)
        TaskRegistry.add(
            Task(TASK, source, [preprocessors.tokenize], {feature: Feature(ByteVocabulary())})
        )

    yield add
    TaskRegistry.remove(TASK)
    set_tfds_data_dir_override(None)


def _copy(tmp_path, file_format: str = "tfrecord"):
    """A private copy of TFDS's glue data dir in `file_format`, and its sst2 version folder."""
    data_dir = tmp_path / file_format
    shutil.copytree(FIXTURES / file_format / "glue", data_dir / "glue")
    return data_dir, data_dir / "glue" / "sst2" / "2.0.0"


def _preview(capsys, feature: str = "sentence") -> tuple[int, str, str]:
    """`t5forge tasks preview` of the whole train split: status, stdout, stderr."""
    status = t5forge_in_process(
        "tasks", "preview", TASK, "--split=train", "-n", "100",
        f"--sequence_length={feature}=64",
    )  # fmt: skip
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def _tfds(data_dir) -> TfdsDataSource:
    return TfdsDataSource("glue/sst2:2.0.0", tfds_data_dir=str(data_dir))


# -- dataset_info.json ---------------------------------------------------------------------


def _set_shard_length(info, value):
    info["splits"][0]["shardLengths"][1] = value


MALFORMED_INFO = {  # the change -> what the line names
    "non-numeric shard length": (
        lambda info: _set_shard_length(info, "twenty"),
        "shardLengths[1] is 'twenty', not a number of examples",
    ),
    "negative shard length": (
        lambda info: _set_shard_length(info, "-3"),
        "shardLengths[1] is '-3', not a number of examples",
    ),
    "shard lengths not a list": (
        lambda info: info["splits"][0].update(shardLengths="60"),
        "shardLengths is '60', not a list",
    ),
    "no name": (lambda info: info.pop("name"), "'name' is missing"),
    "a split without a name": (lambda info: info["splits"][0].pop("name"), "has no 'name'"),
    "splits not a list": (lambda info: info.update(splits="train"), "'splits' is not a list"),
    "a template that is not a string": (
        lambda info: info["splits"][0].update(filepathTemplate=7),
        "filepathTemplate is not a string",
    ),
}


@pytest.mark.parametrize("change", sorted(MALFORMED_INFO))
def test_a_malformed_dataset_info_is_one_line_naming_file_and_field(
    tmp_path, capsys, register, change
):
    data_dir, version_dir = _copy(tmp_path)
    info_path = version_dir / "dataset_info.json"
    info = json.loads(info_path.read_text())
    edit, named = MALFORMED_INFO[change]
    edit(info)
    info_path.write_text(json.dumps(info))
    register(_tfds(data_dir))
    status, _, err = _preview(capsys)
    line = one_error(status, err)
    assert f"{info_path}: " in line and named in line and "tfds build" in line, line


# -- shard lengths against the records read ------------------------------------------------


def _rewrite_tfrecord(shard, keep: int, extra) -> None:
    frames = tfrecord_frames(shard)
    shard.write_bytes(b"".join(frames[:keep] + tfrecord_frames(extra)[:3]))


def _rewrite_array_record(shard, keep: int, extra) -> None:
    records = ArrayRecordReader(str(shard)).read_all()[:keep]
    records += ArrayRecordReader(str(extra)).read_all()[:3]
    writer = ArrayRecordWriter(str(shard), "group_size:1")
    for record in records:
        writer.write(record)
    writer.close()


REWRITE = {"tfrecord": _rewrite_tfrecord, "array_record": _rewrite_array_record}


@pytest.mark.parametrize("file_format", sorted(REWRITE))
@pytest.mark.parametrize(("kept", "found"), [(20, "more"), (10, "fewer")])
def test_a_shard_whose_records_disagree_with_dataset_info_is_refused(
    tmp_path, capsys, register, file_format, kept, found
):
    """A shard holding 23 or 13 records where dataset_info.json records 20: TFDS reads shards
    to their end and asserts the split's recorded length, so it fails too; t5forge refuses in
    one line instead of reading 60 of 63 records without a word."""
    data_dir, version_dir = _copy(tmp_path, file_format)
    shard = version_dir / SHARD.format(file_format)
    REWRITE[file_format](
        shard, kept, version_dir / SHARD.format(file_format).replace("01-of", "02-of")
    )
    register(_tfds(data_dir))
    status, _, err = _preview(capsys)
    line = one_error(status, err)
    count = "more than 20" if found == "more" and file_format == "tfrecord" else str(kept + 3)
    assert f"{shard} holds {count} records where dataset_info.json says 20" in line, line


def test_a_slice_inside_a_longer_shard_reads_what_tfds_reads(tmp_path, register):
    """train[:30] ends inside shard 1: TFDS takes its 10 records there and asserts 30, so
    records appended past the recorded end are not read, and nothing is refused."""
    data_dir, version_dir = _copy(tmp_path)
    shard = version_dir / SHARD.format("tfrecord")
    _rewrite_tfrecord(shard, 20, version_dir / SHARD.format("tfrecord").replace("01-of", "02-of"))
    sliced = TfdsDataSource(
        "glue/sst2:2.0.0", tfds_data_dir=str(data_dir), splits={"train": "train[:30]"}
    )
    original = TfdsDataSource(
        "glue/sst2:2.0.0", tfds_data_dir=str(FIXTURES / "tfrecord"), splits={"train": "train[:30]"}
    )
    assert [x["idx"] for x in sliced.split("train")] == [x["idx"] for x in original.split("train")]


# -- the data directory --------------------------------------------------------------------


def test_a_tfds_data_dir_that_is_a_file_is_named_a_file(tmp_path, capsys, register):
    a_file = tmp_path / "tensorflow_datasets"
    a_file.write_text("not a directory\n")
    register(TfdsDataSource("glue/sst2:2.0.0"))
    status = t5forge_in_process(
        "cache-tasks", f"--tasks={TASK}", f"--output_cache_dir={tmp_path / 'cache'}",
        f"--tfds_data_dir={a_file}",
    )  # fmt: skip
    line = one_error(status, capsys.readouterr().err)
    assert f"TFDS data directory {a_file} is a file, not a directory" in line, line
    assert "not prepared" not in line


# -- compressed TFRecords ------------------------------------------------------------------


@pytest.mark.parametrize("compression", sorted(COMPRESS))
def test_compressed_tfds_shards_read_as_the_uncompressed_ones(
    tmp_path, capsys, register, compression
):
    register(_tfds(FIXTURES / "tfrecord"))
    status, expected, _ = _preview(capsys)
    assert status == 0 and expected.count("--- example") == 60
    data_dir, version_dir = _copy(tmp_path)
    for shard in version_dir.glob("glue-train.tfrecord-*"):
        shard.write_bytes(COMPRESS[compression](shard.read_bytes()))
    register(_tfds(data_dir))
    assert _preview(capsys) == (0, expected, "")


def _compressed_reviews(tmp_path, compression: str) -> str:
    for path in REVIEWS:
        (tmp_path / path.name).write_bytes(COMPRESS[compression](path.read_bytes()))
    return str(tmp_path / "reviews-*.tfrecord")


def _reviews_source(pattern: str, **kwargs) -> TFExampleDataSource:
    from t5forge.data.tf_formats import feature_specs as tf

    description = {"inputs": tf.FixedLenFeature([], tf.string)}
    return TFExampleDataSource({"train": pattern}, feature_description=description, **kwargs)


def _seqio_reader(**arguments):
    """SeqIO's idiom, as a task module writes it: TensorFlow's TFRecordDataset, partially
    applied (here through t5forge's stand-in for `import tensorflow as tf`)."""
    with stand_in_modules():
        import tensorflow as tf

    return functools.partial(tf.data.TFRecordDataset, **arguments)


READERS = {  # how the task module reads the files
    "the default reader": {},
    "TFRecordDataset with compression_type": {"compression_type": "{compression}"},
    "TFRecordDataset with every argument": {
        "compression_type": "{compression}",
        "buffer_size": 1 << 20,
        "num_parallel_reads": 4,
    },
}


@pytest.mark.parametrize("compression", sorted(COMPRESS))
@pytest.mark.parametrize("reader", sorted(READERS))
def test_compressed_tfexample_files_read_as_the_uncompressed_ones(
    tmp_path, capsys, register, compression, reader
):
    register(_reviews_source(str(FIXTURES / "tfexample" / "reviews-*.tfrecord")), "inputs")
    status, expected, _ = _preview(capsys, "inputs")
    assert status == 0 and expected.count("--- example") == 40
    arguments = {
        name: value.format(compression=compression) if isinstance(value, str) else value
        for name, value in READERS[reader].items()
    }
    kwargs = {"reader_cls": _seqio_reader(**arguments)} if arguments else {}
    register(_reviews_source(_compressed_reviews(tmp_path, compression), **kwargs), "inputs")
    assert _preview(capsys, "inputs") == (0, expected, "")


REFUSED_READERS = {  # reader arguments -> what the line names
    "an unknown compression_type": ({"compression_type": "LZ4"}, "compression_type='LZ4'"),
    "a negative buffer_size": ({"buffer_size": -1}, "buffer_size=-1"),
    "GZIP named for plain files": ({"compression_type": "GZIP"}, "damaged GZIP TFRecord file"),
}


@pytest.mark.parametrize("case", sorted(REFUSED_READERS))
def test_a_reader_argument_tf_data_refuses_is_one_line(capsys, register, case):
    arguments, named = REFUSED_READERS[case]
    pattern = str(FIXTURES / "tfexample" / "reviews-*.tfrecord")
    register(_reviews_source(pattern, reader_cls=_seqio_reader(**arguments)), "inputs")
    status, _, err = _preview(capsys, "inputs")
    line = one_error(status, err)
    assert named in line, line


@pytest.mark.parametrize("compression", sorted(COMPRESS))
def test_a_truncated_compressed_file_is_one_line_naming_it(tmp_path, compression):
    path = tmp_path / "reviews.tfrecord"
    path.write_bytes(COMPRESS[compression](REVIEWS[0].read_bytes())[:-40])
    with pytest.raises(DataError) as error:
        list(read_records(path))
    assert f"{path}: damaged {compression} TFRecord" in str(error.value)
    assert "\n" not in str(error.value)
