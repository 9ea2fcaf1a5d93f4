"""TFRecord files read without TensorFlow, one record at a time, every checksum checked.

A TFRecord file is a run of records framed as: uint64 length, uint32 masked CRC32C of the
length bytes, the data, uint32 masked CRC32C of the data (little-endian; TensorFlow's
`record_writer.cc`). Reading streams the file, so a shard on an object store is never held
whole; a damaged frame (a checksum that does not match, a file that ends inside a record)
is one `DataError` naming the file and the byte offset of the record, so nothing after the
damage is taken for data.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator

import google_crc32c

from t5forge import storage
from t5forge.errors import DataError

_HEADER = struct.Struct("<QI")
_FOOTER = struct.Struct("<I")
_MASK_DELTA = 0xA282EAD8


def masked_crc32c(data: bytes) -> int:
    """TensorFlow's masked CRC32C: the CRC rotated right by 15 bits plus a constant, so a
    checksum stored inside checksummed data does not check itself."""
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def _damaged(path: str, offset: int, what: str) -> DataError:
    return DataError(
        f"{path}: damaged TFRecord at byte {offset}: {what}; re-create or re-download the file"
    )


def read_records(path: str | os.PathLike) -> Iterator[bytes]:
    """Yields the data of each record of a TFRecord file (local or `gs://`/`s3://`), in order."""
    path = os.fspath(path)
    offset = 0
    try:
        opened = storage.open_file(path, "rb")
    except FileNotFoundError:
        raise DataError(f"{path}: no such TFRecord file; check the path") from None
    with opened as f:
        while header := f.read(_HEADER.size):
            if len(header) < _HEADER.size:
                raise _damaged(path, offset, "the file ends inside a record's length header")
            length, length_crc = _HEADER.unpack(header)
            if masked_crc32c(header[:8]) != length_crc:
                raise _damaged(path, offset, "the record length's checksum does not match")
            body = f.read(length + _FOOTER.size)
            if len(body) < length + _FOOTER.size:
                raise _damaged(
                    path, offset, f"the file ends inside a record of {length} bytes (truncated)"
                )
            data = body[:length]
            (data_crc,) = _FOOTER.unpack(body[length:])
            if masked_crc32c(data) != data_crc:
                raise _damaged(path, offset, "the record data's checksum does not match")
            yield data
            offset += _HEADER.size + length + _FOOTER.size
