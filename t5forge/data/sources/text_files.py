"""Sources over local or object-storage text files: JSON lines, text lines and TSV.

Each split is a list of file patterns, read whole on first use (gzip and zlib files too) and
kept as rows, so the split is random access: grain shuffles it globally and resumes exactly.
"""

from __future__ import annotations

import contextlib
import csv
import functools
import gzip
import json
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import IO

from t5forge import storage
from t5forge.data.sources import Example, Patterns, check_split, expand_patterns
from t5forge.errors import DataError


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
        check_split(type(self).__name__, split, self.split_names)
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
