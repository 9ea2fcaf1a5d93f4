"""Data sources: where a task's raw examples come from, split by split.

A source answers three questions a pipeline needs before it reads anything: which splits
exist (`split_names`), how big each one is (`num_examples`, None when unknown), and how to
read one (`split(name)`). A split is either random access (`__len__`/`__getitem__`, what
grain needs for global shuffling, sharding and exact resume) or, for streaming sources,
a re-iterable (`iter()` starts from the beginning). Sources load lazily and pickle without
their loaded rows, so registering a task is cheap and grain workers can rebuild them.
"""

from __future__ import annotations

import contextlib
import csv
import functools
import gzip
import json
import os
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import IO, Any, Protocol, runtime_checkable

from t5forge import storage
from t5forge.errors import DataError

Example = dict[str, Any]
Patterns = str | os.PathLike | Sequence[str | os.PathLike]


@runtime_checkable
class DataSource(Protocol):
    """What a Task needs from a source."""

    @property
    def split_names(self) -> tuple[str, ...]: ...

    def num_examples(self, split: str) -> int | None: ...

    def split(self, split: str) -> Sequence[Example] | Iterable[Example]: ...


def is_random_access(split_data: Any) -> bool:
    """True when grain can index the split (and so shuffle it globally and resume exactly)."""
    return hasattr(split_data, "__len__") and hasattr(split_data, "__getitem__")


def _check_split(source_name: str, split: str, split_names: Sequence[str]) -> None:
    if split not in split_names:
        raise DataError(
            f"{source_name} has no split {split!r}; available splits: {', '.join(split_names)}"
        )


def expand_patterns(patterns: Patterns, split: str) -> list[str]:
    """Expands globs (sorted, so the order is deterministic); a pattern matching nothing fails."""
    if isinstance(patterns, (str, os.PathLike)):
        patterns = [patterns]
    files: list[str] = []
    for pattern in patterns:
        matches = storage.glob(pattern)
        if not matches:
            raise DataError(
                f"no file matches {str(pattern)!r} (split {split!r}); check the path "
                "or set T5FORGE_DATA_DIR"
            )
        for match in matches:
            storage.require_kind(match, "file", f"the {split} data file")
        files.extend(matches)
    return files


def numbered_lines(path: str) -> Iterator[tuple[int, str]]:
    """(line number, text) of a UTF-8 text file, gzipped if it ends in .gz.

    Bytes that are not UTF-8 and a gzip stream that ends early or is damaged are a DataError
    naming the file (and the line), instead of a decoder's exception that names neither. So is
    a NUL byte: valid UTF-8, but no text holds one, and SentencePiece would make it an unknown
    token without a word; a file full of them is UTF-16 (whose ASCII reads as UTF-8 with a NUL
    after every letter), which would otherwise train on garbage.
    """
    line_number = 0
    try:
        with _open_lines(path) as f:
            for line_number, raw in enumerate(f, start=1):
                if b"\0" in raw:
                    raise DataError(
                        f"{path}:{line_number}: a NUL byte at column {raw.index(0) + 1}"
                        f"{_utf16_hint(raw)}; re-encode the file as UTF-8 or remove the NULs"
                    )
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    raise DataError(
                        f"{path}:{line_number}: not UTF-8 text (byte {raw[e.start]:#04x} at "
                        f"column {e.start + 1}{_utf16_hint(raw)}); re-encode the file as UTF-8"
                    ) from None
                yield line_number, text
    except (EOFError, gzip.BadGzipFile, zlib.error) as e:
        raise DataError(
            f"{path}: the gzip data is truncated or damaged after line {line_number} ({e}); "
            "re-create or re-download the file"
        ) from None


def _utf16_hint(raw: bytes) -> str:
    """', the file looks like UTF-16' when NULs or a UTF-16 byte-order mark say so."""
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")) or raw.count(0) * 3 >= len(raw.rstrip()):
        return ", the file looks like UTF-16"
    return ""


@contextlib.contextmanager
def _open_lines(path: str) -> Iterator[IO[bytes]]:
    """The file's bytes, ungzipped when it ends in .gz; local or on an object store."""
    with storage.open_file(path, "rb") as raw:
        if not path.endswith(".gz"):
            yield raw
            return
        with gzip.GzipFile(fileobj=raw, mode="rb") as unzipped:
            yield unzipped


def _read_json_lines(path: str) -> list[Example]:
    """Rows of a JSONL file; a row lacking a field the first row has is refused here, with its
    file and line, rather than when training reaches it."""
    rows = []
    expected: set[str] | None = None
    for line_number, line in numbered_lines(path):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise DataError(
                f"{path}:{line_number}: malformed JSON ({e.msg}); fix or remove that line"
            ) from None
        if not isinstance(row, dict):
            raise DataError(
                f"{path}:{line_number}: expected a JSON object per line, got {type(row).__name__}"
            )
        expected = set(row) if expected is None else expected
        if not expected <= row.keys():
            missing = ", ".join(sorted(expected - row.keys()))
            raise DataError(
                f"{path}:{line_number}: no field {missing} (the rows before have "
                "it); add it, with null for an absent value"
            )
        rows.append(row)
    return rows


def _read_text_lines(path: str, field: str) -> list[Example]:
    return [{field: line.rstrip("\r\n")} for _, line in numbered_lines(path) if line.strip()]


def _read_tsv(path: str, field_names: Sequence[str]) -> list[Example]:
    rows = []
    numbered = list(numbered_lines(path))
    lines = csv.reader((line for _, line in numbered), delimiter="\t", quoting=csv.QUOTE_NONE)
    for (line_number, _), values in zip(numbered, lines):
        if not values:
            continue
        if len(values) != len(field_names):
            raise DataError(
                f"{path}:{line_number}: expected {len(field_names)} tab-separated fields "
                f"({', '.join(field_names)}), got {len(values)}"
            )
        rows.append(dict(zip(field_names, values)))
    return rows


class LazyRows:
    """A random-access split whose rows are read on first use and dropped when pickled."""

    def __init__(self, load: Callable[[], list[Example]]):
        self._load = load
        self._rows: list[Example] | None = None

    def _ensure(self) -> list[Example]:
        if self._rows is None:
            self._rows = self._load()
        return self._rows

    def __len__(self) -> int:
        return len(self._ensure())

    def __getitem__(self, index: int) -> Example:
        return dict(self._ensure()[index])

    def __getstate__(self):
        return {"_load": self._load, "_rows": None}


class _ReadFiles:
    """A picklable `reader(file)` over several files (lambdas do not cross process boundaries)."""

    def __init__(self, reader: Callable[[str], list[Example]], files: list[str]):
        self.reader, self.files = reader, files

    def __call__(self) -> list[Example]:
        rows: list[Example] = []
        for path in self.files:
            rows.extend(self.reader(path))
        return rows


class _FileSource:
    """Shared split -> file-pattern bookkeeping for the file formats below."""

    def __init__(self, split_patterns: Mapping[str, Patterns], reader: Callable[[str], list]):
        if not split_patterns:
            raise DataError(f"{type(self).__name__} needs at least one split -> file pattern")
        self.split_patterns = dict(split_patterns)
        self._reader = reader
        self._splits: dict[str, LazyRows] = {}

    @property
    def split_names(self) -> tuple[str, ...]:
        return tuple(self.split_patterns)

    def split(self, split: str) -> LazyRows:
        _check_split(type(self).__name__, split, self.split_names)
        if split not in self._splits:
            files = expand_patterns(self.split_patterns[split], split)
            self._splits[split] = LazyRows(_ReadFiles(self._reader, files))
        return self._splits[split]

    def num_examples(self, split: str) -> int:
        return len(self.split(split))

    def fingerprinted_files(self, split: str) -> list[str]:
        """The files a split reads (none for a split this source lacks), for fingerprints."""
        if split not in self.split_patterns:
            return []
        return expand_patterns(self.split_patterns[split], split)

    def __repr__(self):
        return f"{type(self).__name__}({self.split_patterns!r})"


class JsonLinesSource(_FileSource):
    """One JSON object per line (`.jsonl`, `.jsonl.gz`); globs allowed per split."""

    def __init__(self, split_patterns: Mapping[str, Patterns]):
        super().__init__(split_patterns, _read_json_lines)


class TextLineSource(_FileSource):
    """One example per non-empty line, stored under `field` (default 'text')."""

    def __init__(self, split_patterns: Mapping[str, Patterns], field: str = "text"):
        super().__init__(split_patterns, functools.partial(_read_text_lines, field=field))


class TsvSource(_FileSource):
    """Tab-separated lines, one field per column (default: inputs, targets)."""

    def __init__(
        self,
        split_patterns: Mapping[str, Patterns],
        field_names: Sequence[str] = ("inputs", "targets"),
    ):
        super().__init__(
            split_patterns, functools.partial(_read_tsv, field_names=tuple(field_names))
        )


class _StreamingSplit:
    """A re-iterable over a Hugging Face streaming split."""

    def __init__(self, dataset):
        self._dataset = dataset

    def __iter__(self) -> Iterator[Example]:
        return iter(self._dataset)


_HF_FILE_BUILDERS = {
    ".json": "json",
    ".jsonl": "json",
    ".csv": "csv",
    ".parquet": "parquet",
    ".txt": "text",
}


def _hf_builder_for(data_files: Mapping[str, Patterns]) -> str:
    first = next(iter(data_files.values()))
    name = str(first if isinstance(first, (str, os.PathLike)) else first[0])
    stem = name[:-3] if name.endswith(".gz") else name
    for suffix, builder in _HF_FILE_BUILDERS.items():
        if stem.endswith(suffix):
            return builder
    raise DataError(
        f"cannot tell the format of {name!r}; pass path='json'|'csv'|'parquet'|'text' "
        "to HuggingFaceSource"
    )


class HuggingFaceSource:
    """A Hugging Face `datasets` source: local JSON/CSV/Parquet/text files or a Hub dataset.

    `HuggingFaceSource(data_files={'train': 'a/*.jsonl.gz'})` reads local files (format from
    the extension); `HuggingFaceSource('user/name', name=config)` loads from the Hub;
    `streaming=True` gives iterable splits for corpora that do not fit on disk.
    """

    def __init__(
        self,
        path: str | None = None,
        *,
        name: str | None = None,
        data_files: Mapping[str, Patterns] | None = None,
        streaming: bool = False,
        **load_kwargs,
    ):
        if path is None and not data_files:
            raise DataError("HuggingFaceSource needs a dataset name/path or data_files")
        self.data_files = dict(data_files) if data_files else None
        self.path = path or _hf_builder_for(self.data_files)
        self.name = name
        self.streaming = streaming
        self.load_kwargs = load_kwargs
        self._dataset = None

    def _load(self):
        if self._dataset is None:
            import datasets

            data_files = None
            if self.data_files:
                data_files = {s: expand_patterns(p, s) for s, p in self.data_files.items()}
            try:
                self._dataset = datasets.load_dataset(
                    self.path,
                    self.name,
                    data_files=data_files,
                    streaming=self.streaming,
                    **self.load_kwargs,
                )
            except (FileNotFoundError, ValueError, datasets.exceptions.DatasetNotFoundError) as e:
                first_line = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                raise DataError(
                    f"cannot load Hugging Face dataset {self.path!r}: {first_line}"
                ) from None
        return self._dataset

    def __getstate__(self):
        state = dict(self.__dict__)
        if self.streaming:
            state["_dataset"] = None
        return state

    @property
    def split_names(self) -> tuple[str, ...]:
        if self.data_files:
            return tuple(self.data_files)
        return tuple(self._load().keys())

    def split(self, split: str):
        _check_split(f"Hugging Face dataset {self.path!r}", split, self.split_names)
        data = self._load()[split]
        return _StreamingSplit(data) if self.streaming else data

    def num_examples(self, split: str) -> int | None:
        _check_split(f"Hugging Face dataset {self.path!r}", split, self.split_names)
        data = self._load()[split]
        if not self.streaming:
            return len(data)
        info = getattr(data, "info", None)
        splits = getattr(info, "splits", None) or {}
        return splits[split].num_examples if split in splits else None

    def __repr__(self):
        return f"HuggingFaceSource({self.path!r}, streaming={self.streaming})"


class _FunctionSplit:
    """A re-iterable calling `fn(split)` each time iteration starts."""

    def __init__(self, fn, split):
        self.fn, self.split = fn, split

    def __iter__(self):
        return iter(self.fn(self.split))


class FunctionSource:
    """Examples produced by `fn(split)`: a list/sequence (random access) or any iterable.

    The function must be deterministic and top level (picklable) so pipelines can resume.
    """

    def __init__(
        self,
        fn: Callable[[str], Iterable[Example]],
        splits: Sequence[str],
        num_examples: Mapping[str, int] | None = None,
    ):
        self.fn = fn
        self._split_names = tuple(splits)
        self._num_examples = dict(num_examples or {})

    @property
    def split_names(self) -> tuple[str, ...]:
        return self._split_names

    def split(self, split: str):
        _check_split(
            f"FunctionSource({getattr(self.fn, '__name__', self.fn)})", split, self.split_names
        )
        probe = self.fn(split)
        if is_random_access(probe):
            return probe
        return _FunctionSplit(self.fn, split)

    def num_examples(self, split: str) -> int | None:
        if split in self._num_examples:
            return self._num_examples[split]
        data = self.split(split)
        return len(data) if is_random_access(data) else None

    def __repr__(self):
        return f"FunctionSource({getattr(self.fn, '__name__', self.fn)!r})"
