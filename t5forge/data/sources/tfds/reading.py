"""The examples of a prepared TFDS split, read as TFDS reads them.

TFRecord shards stream: a split is a re-iterable that interleaves its shard slices as TFDS's
`as_dataset` does (tf.data interleave, cycle 16, block 16), so the examples come in TFDS's
order. ArrayRecord shards are random access, as TFDS's `data_source` reads them (the shard
slices one after another): grain can shuffle them globally and resume exactly. ArrayRecord's
reader needs a local file, so a shard on an object store is copied once into t5forge's
staging folder.
"""

from __future__ import annotations

import itertools
import os
import tempfile
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from t5forge import storage
from t5forge.data.grain_ops.interleave import interleave
from t5forge.data.sources.tfds.split_spec import FileSlice
from t5forge.data.tf_formats.example import parse_example
from t5forge.data.tf_formats.records import read_records
from t5forge.errors import DataError

Decode = Callable[[dict, str], dict[str, Any]]
CYCLE_LENGTH = BLOCK_LENGTH = 16


def _miscounted_shard(path: str, found: str, expected: int) -> DataError:
    return DataError(
        f"{path} holds {found} records where dataset_info.json says {expected} "
        "(a truncated, replaced or appended-to shard); re-prepare the dataset with `tfds build`"
    )


def _tfrecord_slice(piece: FileSlice, decode: Decode) -> Iterator[dict]:
    """The slice's examples. A shard that holds fewer records than dataset_info.json says, or
    more where the slice reads to its end, is refused rather than read: TFDS reads a shard to
    its end and asserts the split's recorded length (ReadConfig.assert_cardinality, on by
    default), so a TFDS user gets an error there too, and reading only the recorded count
    would drop the extra records without a word."""
    records = read_records(piece.path)
    count = 0
    for index, record in enumerate(itertools.islice(records, piece.skip, piece.skip + piece.take)):
        where = f"{piece.path} record {piece.skip + index}"
        yield decode(parse_example(record, where), where)
        count += 1
    if count < piece.take:
        raise _miscounted_shard(piece.path, str(piece.skip + count), piece.skip + piece.take)
    if piece.reaches_end and next(records, None) is not None:
        raise _miscounted_shard(
            piece.path, f"more than {piece.examples_in_shard}", piece.examples_in_shard
        )


def _local_copy(path: str) -> str:
    """A local path for an ArrayRecord shard, copied from an object store on first use."""
    if not storage.is_url(path):
        return path
    target = storage.staging_folder(path)
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=target.parent, delete=False) as partial:
            storage.copy(path, partial.name)
        os.replace(partial.name, target)
    return os.fspath(target)


def _check_record_count(piece: FileSlice, local_path: str) -> None:
    """Refuses an ArrayRecord shard whose record count (in its footer, so cheap to read) is
    not dataset_info.json's: indexes past the recorded count would be silently unread, and
    indexes before it would fail mid-run."""
    from array_record.python.array_record_module import ArrayRecordReader

    if piece.examples_in_shard is None:
        return
    reader = ArrayRecordReader(local_path)
    try:
        found = reader.num_records()
    finally:
        reader.close()
    if found != piece.examples_in_shard:
        raise _miscounted_shard(piece.path, str(found), piece.examples_in_shard)


class RandomAccessSplit:
    """ArrayRecord shard slices as one sequence of decoded examples (TFDS's data_source)."""

    def __init__(self, slices: Sequence[FileSlice], decode: Decode, description: str):
        self._slices, self._decode, self._description = tuple(slices), decode, description
        self._records = None

    def _source(self):
        if self._records is None:
            from array_record.python.array_record_data_source import ArrayRecordDataSource

            for piece in self._slices:
                if not storage.is_url(piece.path) and not os.path.exists(piece.path):
                    raise DataError(f"{piece.path} is missing; re-prepare the dataset")
            local = [_local_copy(piece.path) for piece in self._slices]
            for piece, path in zip(self._slices, local):
                _check_record_count(piece, path)
            instructions = [
                f"{path}[{p.skip}:{p.skip + p.take}]" for p, path in zip(self._slices, local)
            ]
            self._records = ArrayRecordDataSource(instructions)
        return self._records

    def __len__(self) -> int:
        return sum(piece.take for piece in self._slices)

    def __getitem__(self, index: int) -> dict[str, Any]:
        if not -len(self) <= index < len(self):
            raise IndexError(f"{self._description}: index {index} out of range")
        index %= len(self)
        where = f"{self._description} example {index}"
        try:
            record = self._source()[index]
        except DataError:
            raise
        except (RuntimeError, ValueError, OSError) as e:
            first_line = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise DataError(f"{where}: damaged ArrayRecord shard ({first_line})") from None
        return self._decode(parse_example(record, where), where)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return (self[index] for index in range(len(self)))

    def __getstate__(self):
        return {**self.__dict__, "_records": None}


def _array_record_slice(piece: FileSlice, decode: Decode) -> Iterator[dict]:
    return iter(RandomAccessSplit([piece], decode, piece.path))


class StreamingSplit:
    """Shard slices read in TFDS's interleaved order; re-iterable, streaming for TFRecord."""

    def __init__(self, slices: Sequence[FileSlice], file_format: str, decode: Decode):
        self._slices, self._decode = tuple(slices), decode
        self._read_slice = _tfrecord_slice if file_format == "tfrecord" else _array_record_slice

    def _open(self, piece: FileSlice) -> Iterator[dict]:
        return self._read_slice(piece, self._decode)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return interleave(self._slices, self._open, CYCLE_LENGTH, BLOCK_LENGTH)
