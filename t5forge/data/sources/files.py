"""SeqIO's file sources without TensorFlow: `FileDataSource` and `TFExampleDataSource`.

`FileDataSource(read_file_fn, split_to_filepattern)` reads a split's files (globs expanded
and sorted) with `read_file_fn(path) -> iterable of examples` - a plain Python function over
one path where SeqIO's takes a tf.data dataset of paths - interleaved as SeqIO interleaves
them (cycle_length 16, block_length 16), so the examples come in SeqIO's order.
`TFExampleDataSource(split_to_filepattern, feature_description)` is that over TFRecord files
of tf.Examples, each parsed with the feature description (`tf.io.FixedLenFeature` /
`VarLenFeature`, TensorFlow's or t5forge.data.tf_formats.feature_specs').
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import numpy as np

from t5forge.data.grain_ops.interleave import interleave
from t5forge.data.sources import Patterns, expand_patterns
from t5forge.data.sources.shard_info import ShardInfo, files_for_host
from t5forge.data.tf_formats.parsing import ExampleParser
from t5forge.data.tf_formats.records import read_records
from t5forge.errors import DataError

ReadFile = Callable[[str], Iterable[dict[str, Any]]]


class _InterleavedFiles:
    """A re-iterable over files read by `read_file`, interleaved as tf.data does."""

    def __init__(self, files: list[str], read_file: ReadFile, cycle_length: int, block_length: int):
        self._files, self._read_file = files, read_file
        self._cycle_length, self._block_length = cycle_length, block_length

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return interleave(self._files, self._read_file, self._cycle_length, self._block_length)


class FileDataSource:
    """Examples read from files by `read_file_fn(path)`, split by split (SeqIO's arguments).

    `file_shuffle_buffer_size` is accepted for SeqIO's signature; files are shuffled
    completely (SeqIO's default and recommendation) when a dataset is read with shuffle.
    """

    supports_arbitrary_sharding = False

    def __init__(
        self,
        read_file_fn: ReadFile,
        split_to_filepattern: Mapping[str, Patterns],
        num_input_examples: Mapping[str, int] | None = None,
        caching_permitted: bool = True,
        file_shuffle_buffer_size: int | None = None,
        cycle_length: int = 16,
        block_length: int = 16,
    ):
        if not split_to_filepattern:
            raise DataError(f"{type(self).__name__} needs at least one split -> file pattern")
        if cycle_length < 1 or block_length < 1:
            raise DataError(
                f"cycle_length ({cycle_length}) and block_length ({block_length}) must be >= 1"
            )
        self._read_file_fn = read_file_fn
        self.split_to_filepattern = dict(split_to_filepattern)
        self._num_input_examples = dict(num_input_examples or {})
        self.caching_permitted = caching_permitted
        self.file_shuffle_buffer_size = file_shuffle_buffer_size
        self.cycle_length, self.block_length = cycle_length, block_length

    @property
    def splits(self) -> tuple[str, ...]:
        return tuple(self.split_to_filepattern)

    split_names = splits

    def list_shards(self, split: str) -> list[str]:
        """The split's files: its patterns expanded, each sorted."""
        if split not in self.split_to_filepattern:
            raise DataError(
                f"{type(self).__name__} has no split {split!r}; splits: {', '.join(self.splits)}"
            )
        return expand_patterns(self.split_to_filepattern[split], split)

    def fingerprinted_files(self, split: str) -> list[str]:
        """The files a split reads (none for a split this source lacks), for fingerprints."""
        return self.list_shards(split) if split in self.split_to_filepattern else []

    def num_input_examples(self, split: str) -> int | None:
        return self._num_input_examples.get(split)

    num_examples = num_input_examples

    def _read(self, files: list[str]) -> _InterleavedFiles:
        return _InterleavedFiles(files, self._read_file_fn, self.cycle_length, self.block_length)

    def split(self, split: str) -> _InterleavedFiles:
        """The split for a Task: streamed, in SeqIO's unshuffled order."""
        return self._read(self.list_shards(split))

    def get_dataset(
        self,
        split: str = "train",
        shuffle: bool = True,
        seed: int | None = None,
        shard_info: ShardInfo | None = None,
    ) -> _InterleavedFiles:
        """SeqIO's read: this host's files (by file), shuffled by `seed` when `shuffle`."""
        files = files_for_host(self.list_shards(split), shard_info, f"split {split!r}")
        if shuffle:
            files = [files[i] for i in np.random.default_rng(seed).permutation(len(files))]
        return self._read(files)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.split_to_filepattern!r})"


def _read_tfexamples(
    path: str, parse: ExampleParser, reader_cls: Callable[[str], Iterable[bytes]]
) -> Iterator[dict[str, Any]]:
    for index, record in enumerate(reader_cls(path)):
        yield parse(record, f"{path} record {index}")


class TFExampleDataSource(FileDataSource):
    """TFRecord files of tf.Examples parsed with a SeqIO feature description.

    `reader_cls(path)` yields a file's serialized records (default: the TFRecord reader,
    every checksum checked).
    """

    def __init__(
        self,
        split_to_filepattern: Mapping[str, Patterns],
        feature_description: Mapping[str, Any],
        reader_cls: Callable[[str], Iterable[bytes]] = read_records,
        caching_permitted: bool = True,
        file_shuffle_buffer_size: int | None = None,
        cycle_length: int = 16,
        block_length: int = 16,
    ):
        self.feature_description = dict(feature_description)
        super().__init__(
            functools.partial(
                _read_tfexamples,
                parse=ExampleParser(self.feature_description),
                reader_cls=reader_cls,
            ),
            split_to_filepattern,
            caching_permitted=caching_permitted,
            file_shuffle_buffer_size=file_shuffle_buffer_size,
            cycle_length=cycle_length,
            block_length=block_length,
        )
