"""`TfdsDataSource`: SeqIO's TFDS source over a prepared TFDS directory, without TensorFlow.

The data directory is, first to last: `set_tfds_data_dir_override` (what T5X's
`--tfds_data_dir` calls, and which wins over a task's own `tfds_data_dir` as in SeqIO), the
source's `tfds_data_dir`, `$TFDS_DATA_DIR`, `~/tensorflow_datasets`. Nothing is downloaded or
built: a dataset that is not prepared there is one line with the `tfds build` command.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from t5forge.data.sources.shard_info import ShardInfo, files_for_host
from t5forge.data.sources.tfds.dataset_dir import (
    PreparedDataset,
    default_data_dir,
    find_dataset,
    read_prepared,
)
from t5forge.data.sources.tfds.features import ExampleDecoder
from t5forge.data.sources.tfds.reading import RandomAccessSplit, StreamingSplit
from t5forge.data.sources.tfds.split_spec import FileSlice, file_slices
from t5forge.errors import DataError

_data_dir_override: str | None = None
METADATA_FILES = ("dataset_info.json", "features.json")


def set_tfds_data_dir_override(tfds_data_dir: str | None) -> None:
    """Reads every TfdsDataSource from this directory (T5X's --tfds_data_dir); None undoes it."""
    global _data_dir_override
    _data_dir_override = tfds_data_dir


def _refuse_unused(decoders, tfds_builder_kwargs) -> None:
    if decoders:
        raise DataError(
            "TfdsDataSource(decoders=...) customises TensorFlow decoding, which t5forge does "
            "not use; drop the argument (every feature is decoded as TFDS does by default)"
        )
    if tfds_builder_kwargs and set(tfds_builder_kwargs) - {"file_format"}:
        extra = ", ".join(sorted(set(tfds_builder_kwargs) - {"file_format"}))
        raise DataError(
            f"TfdsDataSource(tfds_builder_kwargs=...): t5forge reads prepared datasets and "
            f"takes only file_format there, not {extra}"
        )


class TfdsDataSource:
    """A prepared TFDS dataset as a t5forge data source, with SeqIO's arguments.

    `splits` is None (every split of the dataset), split names, or a mapping from the name a
    task uses to a TFDS split string (`{'validation': 'train[:10%]'}`). A TFRecord split
    streams in TFDS's order; an ArrayRecord split is random access.
    """

    supports_arbitrary_sharding = False

    def __init__(
        self,
        tfds_name: str | None = None,
        tfds_data_dir: str | None = None,
        splits: Iterable[str] | Mapping[str, str] | None = None,
        caching_permitted: bool = True,
        decoders: Any = None,
        tfds_builder_kwargs: Mapping[str, Any] | None = None,
        read_only: bool = False,
    ):
        if not tfds_name:
            raise DataError(
                "TfdsDataSource needs tfds_name='name/config:version' (splits of several "
                "datasets through TfdsSplit are not supported)"
            )
        _refuse_unused(decoders, tfds_builder_kwargs)
        self.tfds_name = tfds_name
        self.tfds_data_dir = tfds_data_dir
        self.caching_permitted = caching_permitted
        self.file_format = (tfds_builder_kwargs or {}).get("file_format")
        if splits is not None and not isinstance(splits, Mapping):
            splits = {name: name for name in splits}
        if splits is not None and not all(isinstance(spec, str) for spec in splits.values()):
            raise DataError(
                f"TfdsDataSource({tfds_name!r}, splits=...): give split names or a mapping to "
                "TFDS split strings such as 'train[:90%]' (TfdsSplit is not supported)"
            )
        self._split_map = dict(splits) if splits is not None else None

    @property
    def data_dir(self) -> str:
        return _data_dir_override or self.tfds_data_dir or default_data_dir()

    @functools.cached_property
    def _prepared(self) -> PreparedDataset:
        prepared = read_prepared(find_dataset(self.tfds_name, self.data_dir))
        if self.file_format and prepared.file_format != self.file_format:
            raise DataError(
                f"{prepared.directory} holds {prepared.file_format} shards, not the "
                f"{self.file_format} that tfds_builder_kwargs asks for; re-prepare the "
                f"dataset with --file_format={self.file_format}"
            )
        return prepared

    @functools.cached_property
    def _decode(self) -> ExampleDecoder:
        return ExampleDecoder(self._prepared.features)

    @property
    def splits(self) -> tuple[str, ...]:
        """The split names a task sees (SeqIO's `splits`)."""
        if self._split_map is not None:
            return tuple(self._split_map)
        return tuple(self._prepared.splits)

    split_names = splits

    def _slices(self, split: str) -> list[FileSlice]:
        if split not in self.splits:
            raise DataError(
                f"TFDS dataset {self.tfds_name!r} has no split {split!r}; splits: "
                f"{', '.join(self.splits)}"
            )
        spec = self._split_map[split] if self._split_map is not None else split
        return file_slices(spec, self._prepared.splits, f"TFDS dataset {self.tfds_name!r}")

    def num_input_examples(self, split: str) -> int:
        return sum(piece.take for piece in self._slices(split))

    num_examples = num_input_examples

    def list_shards(self, split: str) -> list[str]:
        """The shard files a split reads (SeqIO decides by-file sharding from this)."""
        return [piece.path for piece in self._slices(split)]

    def fingerprinted_files(self, split: str) -> list[str]:
        """What a split's examples depend on, for fingerprints: dataset_info.json (the shard
        lengths), features.json (how examples decode) and the shard files the split reads."""
        if split not in self.splits:
            return []
        metadata = [f"{self._prepared.directory}/{name}" for name in METADATA_FILES]
        return [*metadata, *dict.fromkeys(self.list_shards(split))]

    def split(self, split: str) -> RandomAccessSplit | StreamingSplit:
        """The split for a Task: random access for ArrayRecord, streaming for TFRecord."""
        slices = self._slices(split)
        if self._prepared.file_format == "array_record":
            return RandomAccessSplit(slices, self._decode, f"{self.tfds_name} {split}")
        return StreamingSplit(slices, "tfrecord", self._decode)

    def get_dataset(
        self,
        split: str = "train",
        shuffle: bool = True,
        seed: int | None = None,
        shard_info: ShardInfo | None = None,
    ) -> StreamingSplit:
        """SeqIO's read: this host's shard files (by file, as TFDS's input context), in
        file order shuffled by `seed` when `shuffle`, interleaved as TFDS interleaves them."""
        slices = files_for_host(
            self._slices(split), shard_info, f"TFDS dataset {self.tfds_name!r} split {split!r}"
        )
        if shuffle:
            order = np.random.default_rng(seed).permutation(len(slices))
            slices = [slices[i] for i in order]
        return StreamingSplit(slices, self._prepared.file_format, self._decode)

    def __repr__(self) -> str:
        return f"TfdsDataSource({self.tfds_name!r}, data_dir={self.data_dir!r})"
