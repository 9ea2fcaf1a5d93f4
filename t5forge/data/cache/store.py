"""Task caches: run a task's expensive preprocessing once, read it back with random access.

`write_task_cache` runs a task's preprocessors up to its cache point and stores each split
as ArrayRecord shards beside `info.<split>.json` (features, dtypes, shapes, shards) and
`stats.<split>.json` (example and token counts), the layout SeqIO users know. The split is
recorded in the task directory's `COMPLETED` marker only after every other file is
written, so a crash mid-write leaves a cache that is never read. `CachedSource` serves a
completed split as a random-access source: grain can shuffle it globally and resume exactly.

Records are msgpack maps; numeric features are raw little-endian bytes plus their shape,
which keeps reads cheap and the files readable without this package's classes.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import grain
import msgpack
import numpy as np
from array_record.python.array_record_module import ArrayRecordWriter
from tqdm import tqdm

from t5forge import storage
from t5forge.errors import DataError

COMPLETED = "COMPLETED"
STRING = "string"


def task_cache_dir(cache_dir: str | os.PathLike, task_name: str) -> Path:
    """Where one task's cache lives inside a cache directory (a local path or a bucket's URL)."""
    root = storage.path(cache_dir) if storage.is_url(cache_dir) else Path(cache_dir)
    return root / task_name


def shard_paths(task_dir: Path, split: str, shard_count: int) -> list[Path]:
    return [
        task_dir / f"{split}.array_record-{index:05d}-of-{shard_count:05d}"
        for index in range(shard_count)
    ]


def completed_splits(task_dir: Path) -> list[str]:
    """The splits whose cache finished writing (empty when there is no marker)."""
    try:
        with storage.reported(task_dir):
            return json.loads((task_dir / COMPLETED).read_text())["splits"]
    except (OSError, ValueError, KeyError, TypeError):
        return []


def _write_json_atomically(path: Path, content: Any) -> None:
    storage.write_atomically(path, json.dumps(content, indent=2, sort_keys=True) + "\n")


def _set_completed(task_dir: Path, split: str, completed: bool) -> None:
    splits = [s for s in completed_splits(task_dir) if s != split]
    if completed:
        splits.append(split)
    _write_json_atomically(task_dir / COMPLETED, {"splits": sorted(splits)})


# -- example encoding --------------------------------------------------------------------


def _feature_spec(name: str, value: Any) -> dict:
    """dtype and shape (None for variable dims) of one feature, from its first value."""
    array = np.asarray(value)
    if array.dtype.kind in "US":
        return {"dtype": STRING, "shape": [None] * array.ndim}
    if array.dtype.kind not in "biuf":
        raise DataError(
            f"cannot cache feature {name!r} of type {type(value).__name__}; cached features "
            "must be strings, numbers or arrays of them (move the step after the cache point)"
        )
    return {"dtype": array.dtype.name, "shape": [None] * array.ndim}


def feature_specs(example: Mapping[str, Any]) -> dict[str, dict]:
    """The info file's feature specs, taken from a split's first example."""
    return {name: _feature_spec(name, value) for name, value in example.items()}


def encode_example(example: Mapping[str, Any], specs: Mapping[str, dict]) -> bytes:
    """One record; refuses an example whose features differ from the split's specs."""
    if set(example) != set(specs):
        raise DataError(
            f"cached examples must all have the same features: expected {sorted(specs)}, "
            f"got {sorted(example)}"
        )
    record = {}
    for name, spec in specs.items():
        value = example[name]
        if spec["dtype"] == STRING:
            record[name] = value if isinstance(value, str) else [str(v) for v in value]
            continue
        array = np.asarray(value)
        if array.ndim != len(spec["shape"]) or (
            array.size and array.dtype.kind != np.dtype(spec["dtype"]).kind
        ):
            raise DataError(
                f"feature {name!r} changed from {spec['dtype']} rank {len(spec['shape'])} to "
                f"{array.dtype} rank {array.ndim} between examples; make the task consistent"
            )
        little_endian = np.dtype(spec["dtype"]).newbyteorder("<")
        record[name] = [list(array.shape), array.astype(little_endian).tobytes()]
    return msgpack.packb(record, use_bin_type=True)


def _decode(record: bytes, specs: Mapping[str, dict]) -> dict[str, Any]:
    fields = msgpack.unpackb(record, raw=False)
    example = {}
    for name, spec in specs.items():
        value = fields[name]
        if spec["dtype"] == STRING:
            example[name] = value
            continue
        shape, data = value
        dtype = np.dtype(spec["dtype"]).newbyteorder("<")
        array = np.frombuffer(data, dtype=dtype).reshape(shape).astype(spec["dtype"])
        example[name] = array if array.ndim else array[()]
    return example


# -- writing -----------------------------------------------------------------------------


class SplitStats:
    """Example count and token totals of every integer sequence feature; parts of a split
    counted apart (Beam's shards) merge into the same totals.

    `char_vocabularies` (feature -> vocabulary) also counts the characters each feature
    decodes to, `<feature>_chars` as SeqIO's --enable_char_counts: a decode per example."""

    def __init__(self, char_vocabularies: Mapping[str, Any] | None = None):
        self.examples = 0
        self.tokens: dict[str, int] = {}
        self.max_tokens: dict[str, int] = {}
        self.chars: dict[str, int] = {}
        self._char_vocabularies = dict(char_vocabularies or {})

    def add(self, example: Mapping[str, Any], specs: Mapping[str, dict]) -> None:
        self.examples += 1
        for name, spec in specs.items():
            if spec["dtype"] != STRING and spec["dtype"] != "bool" and len(spec["shape"]) == 1:
                length = len(example[name])
                self.tokens[name] = self.tokens.get(name, 0) + length
                self.max_tokens[name] = max(self.max_tokens.get(name, 0), length)
                if name in self._char_vocabularies:
                    text = self._char_vocabularies[name].decode([int(i) for i in example[name]])
                    self.chars[name] = self.chars.get(name, 0) + len(text)

    def merge(self, other: SplitStats) -> SplitStats:
        self.examples += other.examples
        for name, tokens in other.tokens.items():
            self.tokens[name] = self.tokens.get(name, 0) + tokens
            self.max_tokens[name] = max(self.max_tokens.get(name, 0), other.max_tokens[name])
        for name, chars in other.chars.items():
            self.chars[name] = self.chars.get(name, 0) + chars
        return self

    def as_dict(self) -> dict[str, int]:
        stats = {"examples": self.examples}
        for name in sorted(self.tokens):
            stats[f"{name}_tokens"] = self.tokens[name]
            stats[f"{name}_max_tokens"] = self.max_tokens[name]
            if name in self.chars:
                stats[f"{name}_chars"] = self.chars[name]
        return stats


def char_vocabularies(task) -> dict[str, Any]:
    """The vocabulary of each of the task's output features, for SplitStats' character counts."""
    return {name: feature.vocabulary for name, feature in task.output_features.items()}


def default_shard_count(task, split: str) -> int:
    """About one shard per 10,000 examples, between 1 and 64, when the size is known."""
    size = task.num_input_examples(split)
    return 1 if size is None else max(1, min(64, -(-size // 10_000)))


def start_split(task_dir: Path, split: str) -> None:
    """Marks the split unfinished and removes its old shards, before any new file appears."""
    task_dir.mkdir(parents=True, exist_ok=True)
    _set_completed(task_dir, split, completed=False)
    for stale in task_dir.glob(f"{split}.array_record-*"):
        stale.unlink()


def shard_writer(path: Path) -> ArrayRecordWriter:
    """One record per chunk, so reads of single examples stay cheap."""
    return ArrayRecordWriter(str(path), "group_size:1")


def finish_split(
    task_dir: Path,
    split: str,
    specs: Mapping[str, dict] | None,
    shard_count: int,
    stats: SplitStats,
) -> None:
    """Writes the info and statistics files, then the completion marker, last."""
    if specs is None:
        raise DataError(
            f"task {task_dir.name!r} split {split!r} produced no examples; nothing to cache "
            "(check the source files and the task's filters)"
        )
    info = {
        "features": dict(specs),
        "num_shards": shard_count,
        "shard_order": "round_robin",
        "format": "array_record/msgpack",
    }
    _write_json_atomically(task_dir / f"info.{split}.json", info)
    _write_json_atomically(task_dir / f"stats.{split}.json", stats.as_dict())
    _set_completed(task_dir, split, completed=True)


def write_task_cache(
    task,
    split: str,
    output_dir: str | os.PathLike,
    shard_count: int | None = None,
    progress: bool = True,
    seed: int = 0,
    char_counts: bool = False,
) -> Path:
    """Preprocesses one split of `task` up to its cache point and writes it under
    `output_dir/<task name>/`. Returns the task's cache directory.

    Example j goes to shard j % shard_count, and `CachedSource` reads them back in that
    interleaved order, so the cache holds the examples in exactly their uncached order:
    switching a run to the cache does not change what it trains on. `seed` is the random
    steps' (Task.cached_steps_dataset); `char_counts` adds SeqIO's `<feature>_chars` stats.
    """
    if storage.is_url(output_dir):
        staged_dir = storage.staging_folder(os.fspath(output_dir))
        staged = write_task_cache(task, split, staged_dir, shard_count, progress, seed, char_counts)
        return publish_split(staged, task_cache_dir(output_dir, task.name), split)
    task_dir = task_cache_dir(output_dir, task.name)
    start_split(task_dir, split)
    shard_count = shard_count or default_shard_count(task, split)
    specs: dict[str, dict] | None = None
    stats = SplitStats(char_vocabularies(task) if char_counts else None)
    bar = tqdm(
        desc=f"caching {task.name}:{split}",
        total=task.num_input_examples(split),  # raw examples; most steps keep one each
        unit=" examples",
        disable=not progress,
    )
    writers = [shard_writer(path) for path in shard_paths(task_dir, split, shard_count)]
    try:
        with bar:
            for position, example in enumerate(task.get_uncached_examples(split, seed=seed)):
                if specs is None:
                    specs = feature_specs(example)
                writers[position % shard_count].write(encode_example(example, specs))
                stats.add(example, specs)
                bar.update(1)
    finally:
        for writer in writers:
            writer.close()
    finish_split(task_dir, split, specs, shard_count, stats)
    return task_dir


def _split_files(task_dir, split: str) -> list[str]:
    info = json.loads((task_dir / f"info.{split}.json").read_text())
    shards = [p.name for p in shard_paths(task_dir, split, info["num_shards"])]
    return [*shards, f"info.{split}.json", f"stats.{split}.json"]


def publish_split(local_dir: Path, remote_dir, split: str):
    """Copies a split cached locally to its folder on a bucket, in the local writer's order:
    marked unfinished, old shards removed, the files, then the completion marker last. Returns
    the bucket's task folder."""
    _set_completed(remote_dir, split, completed=False)
    for stale in storage.glob(f"{remote_dir}/{split}.array_record-*"):
        with storage.reported(stale):
            storage.path(stale).unlink()
    for name in _split_files(local_dir, split):
        storage.copy(local_dir / name, remote_dir / name)
    _set_completed(remote_dir, split, completed=True)
    return remote_dir


def _local_split(remote_dir, split: str) -> Path:
    """A local copy of a completed split on a bucket (ArrayRecord reads local files), kept in
    the staging folder and reused while its info matches the bucket's."""
    local_dir = storage.staging_folder(os.fspath(remote_dir))
    info = f"info.{split}.json"
    with storage.reported(remote_dir):
        remote_info = (remote_dir / info).read_text()
    if split in completed_splits(local_dir) and (local_dir / info).read_text() == remote_info:
        return local_dir
    start_split(local_dir, split)
    storage.copy(remote_dir / info, local_dir / info)
    for name in _split_files(local_dir, split):
        if name != info:
            storage.copy(remote_dir / name, local_dir / name)
    _set_completed(local_dir, split, completed=True)
    return local_dir


# -- reading -----------------------------------------------------------------------------


def _missing_cache_error(task_name: str, split: str, cache_dirs: Sequence[str]) -> DataError:
    if not cache_dirs:  # USE_CACHED_TASKS left True (T5X's default) and nowhere to look
        return DataError(
            f"task {task_name!r} is read from its cache (use_cached=True, T5X's "
            "USE_CACHED_TASKS), but no cache directory is configured; read its data directly "
            "with --gin.USE_CACHED_TASKS=False (use_cached=False), or name the folder holding "
            "its cache with --seqio_additional_cache_dirs=DIR (build one with `t5forge "
            f"cache-tasks --tasks={task_name} --output_cache_dir=DIR`)"
        )
    incomplete = [
        str(task_cache_dir(d, task_name))
        for d in cache_dirs
        if any(task_cache_dir(d, task_name).glob(f"{split}.array_record-*"))
    ]
    note = f" (ignored incomplete cache in {', '.join(incomplete)})" if incomplete else ""
    target = cache_dirs[0] if cache_dirs else "DIR"
    return DataError(
        f"task {task_name!r} has no completed cache of split {split!r} in "
        f"{list(cache_dirs)}{note}; build it with "
        f"`t5forge cache-tasks --tasks={task_name} --output_cache_dir={target}` "
        "or set use_cached=False"
    )


def completed_cache_dir(task_name: str, split: str, cache_dirs: Iterable[str]) -> Path | None:
    """The task folder of the first cache dir holding a completed cache of the split, if any."""
    for cache_dir in cache_dirs:
        if split in completed_splits(task_cache_dir(cache_dir, task_name)):
            return task_cache_dir(cache_dir, task_name)
    return None


def split_files(task_dir: Path, split: str) -> list[Path]:
    """The files of a completed split's cache: its shards, info and stats."""
    return [task_dir / name for name in _split_files(task_dir, split)]


class CachedSource:
    """Random access over a completed cache of one task split (a grain data source)."""

    def __init__(self, task_name: str, split: str, cache_dirs: str | os.PathLike | Iterable[str]):
        if isinstance(cache_dirs, (str, os.PathLike)):
            cache_dirs = [cache_dirs]
        cache_dirs = [str(d) for d in cache_dirs]
        found = completed_cache_dir(task_name, split, cache_dirs)
        if found is None:
            raise _missing_cache_error(task_name, split, cache_dirs)
        self.task_name = task_name
        self.split = split
        self.directory = _local_split(found, split) if storage.is_url(found) else found
        self.info = json.loads((self.directory / f"info.{split}.json").read_text())
        self.stats = json.loads((self.directory / f"stats.{split}.json").read_text())
        self._specs = self.info["features"]
        self._num_shards = self.info["num_shards"]
        paths = shard_paths(self.directory, split, self._num_shards)
        self._records = grain.sources.ArrayRecordDataSource([str(p) for p in paths])
        # Shard k holds examples k, k + n, k + 2n...; the files are concatenated in shard order.
        size = len(self._records)
        self._shard_offsets = np.cumsum(
            [0] + [len(range(k, size, self._num_shards)) for k in range(self._num_shards)]
        )

    def __len__(self) -> int:
        return len(self._records)

    def _record_index(self, index: int) -> int:
        if not -len(self) <= index < len(self):
            raise IndexError(f"{self!r} has {len(self)} examples, no index {index}")
        index %= len(self)
        return int(self._shard_offsets[index % self._num_shards] + index // self._num_shards)

    def __getitem__(self, index: int) -> dict[str, Any]:
        return _decode(self._records[self._record_index(index)], self._specs)

    def __getitems__(self, indices: Sequence[int]) -> list[dict[str, Any]]:
        records = self._records.__getitems__([self._record_index(i) for i in indices])
        return [_decode(record, self._specs) for record in records]

    def __repr__(self) -> str:
        return f"CachedSource({self.task_name!r}, {self.split!r}, {str(self.directory)!r})"
