"""Which files one host reads when a split is divided among hosts by file (SeqIO's ShardInfo).

TFDS with an input context and SeqIO's file sources give host `index` the files
`index, index + num_shards, ...` of the split, in order, and refuse when there are fewer
files than hosts (some host would read nothing). Same rule here, so each host's examples are
the ones it would read under T5X.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TypeVar

from t5forge.errors import DataError

File = TypeVar("File")


@dataclasses.dataclass(frozen=True)
class ShardInfo:
    """This host's place among the hosts reading a split: `index` of `num_shards`."""

    index: int
    num_shards: int


def files_for_host(files: Sequence[File], shard_info: ShardInfo | None, what: str) -> list[File]:
    """The files (or shard slices) host `shard_info.index` reads; all of them without one."""
    if shard_info is None:
        return list(files)
    if not 0 <= shard_info.index < shard_info.num_shards:
        raise DataError(
            f"shard index {shard_info.index} must be in [0, num_shards={shard_info.num_shards})"
        )
    if len(files) < shard_info.num_shards:
        raise DataError(
            f"{what} has {len(files)} files, fewer than the {shard_info.num_shards} hosts "
            "reading it by file; use fewer hosts, or a Task (which shards by example)"
        )
    return list(files[shard_info.index :: shard_info.num_shards])
