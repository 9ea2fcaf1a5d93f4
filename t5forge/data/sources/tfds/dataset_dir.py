"""Where a prepared TFDS dataset lives and what its `dataset_info.json` says.

`tfds build` writes `DATA_DIR/NAME/CONFIG/VERSION/` (no CONFIG level for a dataset without
configs) holding `dataset_info.json` (the splits, each with its shard lengths and file name
template, and the file format), `features.json` and the shards. SeqIO names a dataset
`name/config:version`; the version may be left out (the newest prepared one) or end in
wildcards (`1.*.*`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re

from t5forge import storage
from t5forge.errors import DataError

_NAME = re.compile(
    r"^(?P<name>[\w-]+)(/(?P<config>[\w.-]+))?(:(?P<version>[\d*]+\.[\d*]+\.[\d*]+))?$"
)
_VERSION = re.compile(r"^\d+\.\d+\.\d+$")
_DEFAULT_TEMPLATE = "{DATASET}-{SPLIT}.{FILEFORMAT}-{SHARD_X_OF_Y}"
FILE_FORMATS = ("tfrecord", "array_record")


def default_data_dir() -> str:
    """TFDS's own default: $TFDS_DATA_DIR, else ~/tensorflow_datasets."""
    return os.environ.get("TFDS_DATA_DIR") or os.path.expanduser("~/tensorflow_datasets")


@dataclasses.dataclass(frozen=True)
class SplitFiles:
    """One split of a prepared dataset: its shard files in order and their lengths."""

    name: str
    paths: tuple[str, ...]
    shard_lengths: tuple[int, ...]

    @property
    def num_examples(self) -> int:
        return sum(self.shard_lengths)


@dataclasses.dataclass(frozen=True)
class PreparedDataset:
    """A prepared dataset directory, read from its dataset_info.json and features.json."""

    directory: str
    file_format: str
    splits: dict[str, SplitFiles]
    features: dict


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def _pick_version(folder: str, wanted: str | None, tfds_name: str, build: str) -> str:
    prepared = [
        p.name
        for p in (storage.path(folder).iterdir() if storage.path(folder).is_dir() else [])
        if _VERSION.match(p.name) and (storage.path(folder) / p.name / "dataset_info.json").exists()
    ]
    if wanted and "*" not in wanted:
        matching = [v for v in prepared if v == wanted]
    else:
        pattern = re.compile(re.escape(wanted or "*.*.*").replace(r"\*", r"\d+") + "$")
        matching = [v for v in prepared if pattern.match(v)]
    if not matching:
        versions = f" (prepared there: {', '.join(sorted(prepared))})" if prepared else ""
        raise DataError(
            f"TFDS dataset {tfds_name!r} is not prepared in {folder}{versions}; prepare it "
            f"with `{build}` or point tfds_data_dir / --tfds_data_dir / TFDS_DATA_DIR at "
            "the directory that holds it"
        )
    return max(matching, key=_version_key)


def find_dataset(tfds_name: str, data_dir: str) -> str:
    """The VERSION directory of `name/config:version` under data_dir; one line if absent."""
    match = _NAME.match(tfds_name)
    if not match:
        raise DataError(
            f"TFDS name {tfds_name!r} is not 'name', 'name/config' or 'name/config:1.2.3'"
        )
    if storage.path(data_dir).is_file():
        raise DataError(
            f"TFDS data directory {data_dir} is a file, not a directory; point tfds_data_dir / "
            "--tfds_data_dir / TFDS_DATA_DIR at the folder `tfds build --data_dir` wrote"
        )
    name, config = match["name"], match["config"]
    folder = os.path.join(data_dir, name, config) if config else os.path.join(data_dir, name)
    base = f"{name}/{config}" if config else name
    build = f"tfds build {base} --data_dir={data_dir}"
    version = _pick_version(folder, match["version"], tfds_name, build)
    return f"{folder.rstrip('/')}/{version}"


def _read_json(path: str) -> dict:
    try:
        with storage.open_file(path, "rb") as f:
            return json.loads(f.read())
    except FileNotFoundError:
        raise DataError(f"{path} is missing; re-prepare the dataset with `tfds build`") from None
    except json.JSONDecodeError as e:
        raise DataError(f"{path}: malformed JSON ({e.msg}); re-prepare the dataset") from None


def _shard_names(template: str, dataset: str, split: str, file_format: str, count: int):
    for index in range(count):
        yield (
            template.replace("{SHARD_X_OF_Y}", f"{index:05d}-of-{count:05d}")
            .replace("{SHARD_INDEX}", f"{index:05d}")
            .replace("{NUM_SHARDS}", f"{count:05d}")
            .replace("{DATASET}", dataset)
            .replace("{SPLIT}", split)
            .replace("{FILEFORMAT}", file_format)
        )


def _malformed(path: str, field: str, what: str) -> DataError:
    return DataError(
        f"{path}: {field} {what}; re-prepare the dataset with `tfds build` (or restore the "
        "file TFDS wrote)"
    )


def _shard_lengths(split: dict, path: str, field: str) -> tuple[int, ...]:
    lengths = split.get("shardLengths", [])
    if not isinstance(lengths, list):
        raise _malformed(path, field, f"is {lengths!r}, not a list of example counts")
    for index, length in enumerate(lengths):
        text = str(length)
        if isinstance(length, bool) or not isinstance(length, (int, str)) or not text.isdigit():
            raise _malformed(path, f"{field}[{index}]", f"is {length!r}, not a number of examples")
    return tuple(int(length) for length in lengths)


def _checked_split(split, index: int, dataset: str, directory: str, file_format: str) -> SplitFiles:
    """One entry of dataset_info.json's `splits`, checked field by field as TFDS's proto is."""
    path = f"{directory}/dataset_info.json"
    if not isinstance(split, dict) or not isinstance(split.get("name"), str) or not split["name"]:
        raise _malformed(path, f"splits[{index}]", "has no 'name'")
    field = f"split {split['name']!r} shardLengths"
    lengths = _shard_lengths(split, path, field)
    template = split.get("filepathTemplate") or _DEFAULT_TEMPLATE
    if not isinstance(template, str):
        raise _malformed(path, f"split {split['name']!r} filepathTemplate", "is not a string")
    names = _shard_names(template, dataset, split["name"], file_format, len(lengths))
    return SplitFiles(split["name"], tuple(f"{directory}/{name}" for name in names), lengths)


def read_prepared(directory: str) -> PreparedDataset:
    """Reads a VERSION directory's dataset_info.json and features.json, checking every field
    t5forge uses once, here, so a malformed file is one line naming the file and the field."""
    path = f"{directory}/dataset_info.json"
    info = _read_json(path)
    if not isinstance(info, dict):
        raise _malformed(path, "the file", "is not a JSON object")
    if not isinstance(info.get("name"), str) or not info["name"]:
        raise _malformed(path, "'name'", "is missing (the dataset name shard files begin with)")
    file_format = info.get("fileFormat", "tfrecord")
    if file_format not in FILE_FORMATS:
        raise DataError(
            f"{directory}: TFDS file format {file_format!r}; t5forge reads "
            f"{' and '.join(FILE_FORMATS)} (re-prepare with --file_format=array_record)"
        )
    entries = info.get("splits", [])
    if not isinstance(entries, list):
        raise _malformed(path, "'splits'", "is not a list")
    splits = {}
    for index, entry in enumerate(entries):
        split = _checked_split(entry, index, info["name"], directory, file_format)
        splits[split.name] = split
    features = _read_json(f"{directory}/features.json")
    return PreparedDataset(directory, file_format, splits, features)
