"""TFRecord files read without TensorFlow, one record at a time, every checksum checked.

A TFRecord file is a run of records framed as: uint64 length, uint32 masked CRC32C of the
length bytes, the data, uint32 masked CRC32C of the data (little-endian; TensorFlow's
`record_writer.cc`). The file as a whole may be compressed, as tf.data's
`compression_type='GZIP'` / `'ZLIB'` writes and reads it: a gzip member, or a zlib stream.
Left unnamed, the compression is recognised from the first bytes (a plain first record's
length checksum, else gzip's or zlib's header), so a compressed shard is read, not reported
as damaged. Reading streams the file, so a shard on an object store is never held whole; a
damaged frame (a checksum that does not match, a file that ends inside a record) is one
`DataError` naming the file and the byte offset of the record in the (decompressed) data,
so nothing after the damage is taken for data.
"""

from __future__ import annotations

import gzip
import os
import struct
import zlib
from collections.abc import Iterator
from typing import IO

import google_crc32c

from t5forge import storage
from t5forge.errors import DataError

_HEADER = struct.Struct("<QI")
_FOOTER = struct.Struct("<I")
_MASK_DELTA = 0xA282EAD8
_GZIP_MAGIC = b"\x1f\x8b"
# tf.data's compression_type values: "" (or None) for none.
COMPRESSION_TYPES = ("", "GZIP", "ZLIB")


def masked_crc32c(data: bytes) -> int:
    """TensorFlow's masked CRC32C: the CRC rotated right by 15 bits plus a constant, so a
    checksum stored inside checksummed data does not check itself."""
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def _damaged(path: str, offset: int, what: str, compression: str) -> DataError:
    where = (
        f"byte {offset} of its {compression}-decompressed data"
        if compression
        else (f"byte {offset}")
    )
    return DataError(
        f"{path}: damaged TFRecord at {where}: {what}; re-create or re-download the file"
    )


def _recognised_compression(start: bytes) -> str:
    """'' when `start` opens a plain TFRecord (its length checksum holds), 'GZIP' or 'ZLIB'
    when it opens that stream; '' for anything else, which the framing then reports."""
    if len(start) >= _HEADER.size:
        _, length_crc = _HEADER.unpack(start[: _HEADER.size])
        if masked_crc32c(start[:8]) == length_crc:
            return ""
    if start.startswith(_GZIP_MAGIC):
        return "GZIP"
    if len(start) >= 2 and start[0] & 0x0F == 8 and (start[0] << 8 | start[1]) % 31 == 0:
        return "ZLIB"
    return ""


class _ZlibReader:
    """read(n) over a zlib stream, decompressed as it is read."""

    def __init__(self, raw: IO[bytes]):
        self._raw, self._inflate, self._pending = raw, zlib.decompressobj(), b""

    def read(self, size: int) -> bytes:
        while len(self._pending) < size and not self._inflate.eof:
            compressed = self._raw.read(1 << 16)
            if not compressed:
                raise EOFError("the compressed stream ends before its end marker")
            self._pending += self._inflate.decompress(compressed)
        data, self._pending = self._pending[:size], self._pending[size:]
        return data


def _decompressed(raw: IO[bytes], compression: str) -> IO[bytes]:
    if compression == "GZIP":
        return gzip.GzipFile(fileobj=raw, mode="rb")
    if compression == "ZLIB":
        return _ZlibReader(raw)
    return raw


def read_records(path: str | os.PathLike, compression_type: str | None = None) -> Iterator[bytes]:
    """Yields the data of each record of a TFRecord file (local or `gs://`/`s3://`), in order.

    `compression_type` is tf.data's: 'GZIP', 'ZLIB', or '' / None to recognise it."""
    path = os.fspath(path)
    if compression_type not in (None, *COMPRESSION_TYPES):
        raise DataError(
            f"{path}: compression_type={compression_type!r}; TFRecords are read with "
            "compression_type '', 'GZIP' or 'ZLIB' (as tf.data.TFRecordDataset)"
        )
    try:
        opened = storage.open_file(path, "rb")
    except FileNotFoundError:
        raise DataError(f"{path}: no such TFRecord file; check the path") from None
    with opened as raw:
        compression = compression_type or _recognised_compression(raw.read(_HEADER.size))
        raw.seek(0)
        try:
            yield from _framed_records(_decompressed(raw, compression), path, compression)
        except (gzip.BadGzipFile, EOFError, zlib.error) as error:
            raise DataError(
                f"{path}: damaged {compression or 'uncompressed'} TFRecord file ({error}); "
                "re-create or re-download the file"
            ) from None


def _framed_records(f: IO[bytes], path: str, compression: str) -> Iterator[bytes]:
    offset = 0
    while header := f.read(_HEADER.size):
        if len(header) < _HEADER.size:
            raise _damaged(
                path, offset, "the file ends inside a record's length header", compression
            )
        length, length_crc = _HEADER.unpack(header)
        if masked_crc32c(header[:8]) != length_crc:
            raise _damaged(path, offset, "the record length's checksum does not match", compression)
        body = f.read(length + _FOOTER.size)
        if len(body) < length + _FOOTER.size:
            raise _damaged(
                path,
                offset,
                f"the file ends inside a record of {length} bytes (truncated)",
                compression,
            )
        data = body[:length]
        (data_crc,) = _FOOTER.unpack(body[length:])
        if masked_crc32c(data) != data_crc:
            raise _damaged(path, offset, "the record data's checksum does not match", compression)
        yield data
        offset += _HEADER.size + length + _FOOTER.size
