"""`tf.data.TFRecordDataset(filenames, compression_type, buffer_size, num_parallel_reads)` as a
task module passes it to SeqIO (`reader_cls=functools.partial(tf.data.TFRecordDataset,
compression_type='GZIP')` for TFExampleDataSource, or as FileDataSource's `read_file_fn`): the
records of the files, read by t5forge's TFRecord reader with TensorFlow's meaning of each
argument. `buffer_size` only sizes TensorFlow's read buffer, so it changes nothing read here;
`num_parallel_reads` over several files interleaves them one record at a time, as tf.data's
deterministic parallel interleave does (one file, SeqIO's case, reads in file order either way).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator, Sequence

from t5forge.data.grain_ops.interleave import interleave
from t5forge.data.tf_formats.records import COMPRESSION_TYPES, read_records
from t5forge.errors import DataError


def _file_names(filenames) -> list[str]:
    if isinstance(filenames, (str, bytes, os.PathLike)):
        filenames = [filenames]
    if not isinstance(filenames, Sequence) or not filenames:
        raise DataError(f"TFRecordDataset(filenames={filenames!r}): give a path or a list of paths")
    return [os.fsdecode(name) for name in filenames]


def tfrecord_dataset(
    filenames,
    compression_type: str | None = None,
    buffer_size: int | None = None,
    num_parallel_reads: int | None = None,
    name: str | None = None,
) -> Iterator[bytes]:
    """The serialized records of `filenames`, as tf.data.TFRecordDataset yields them."""
    files = _file_names(filenames)
    if compression_type not in (None, *COMPRESSION_TYPES):
        raise DataError(
            f"TFRecordDataset(compression_type={compression_type!r}): tf.data takes '', "
            "'GZIP' or 'ZLIB'"
        )
    if buffer_size is not None and (not isinstance(buffer_size, int) or buffer_size < 0):
        raise DataError(
            f"TFRecordDataset(buffer_size={buffer_size!r}): give a number of bytes >= 0 or None"
        )
    parallel = num_parallel_reads or 1
    if len(files) > 1 and (not isinstance(parallel, int) or parallel < 1):
        raise DataError(
            f"TFRecordDataset(num_parallel_reads={num_parallel_reads!r}) over {len(files)} "
            "files: give a number of files to read at once (>= 1); tf.data.AUTOTUNE's order "
            "depends on the machine"
        )
    read = functools.partial(read_records, compression_type=compression_type)
    if len(files) == 1:
        return read(files[0])
    return interleave(files, read, parallel, 1)
