"""Data sources: where a task's raw examples come from, split by split.

A source answers three questions a pipeline needs before it reads anything: which splits
exist (`split_names`), how big each one is (`num_examples`, None when unknown), and how to
read one (`split(name)`). A split is either random access (`__len__`/`__getitem__`, what
grain needs for global shuffling, sharding and exact resume) or, for streaming sources,
a re-iterable (`iter()` starts from the beginning). Sources load lazily and pickle without
their loaded rows, so registering a task is cheap and grain workers can rebuild them.

This package holds what every source shares (the DataSource protocol, the split check, file
patterns); each kind of source is a module of its own: text_files (JSON lines, text lines,
TSV), hugging_face, function, files (SeqIO's FileDataSource and TFExampleDataSource) and
tfds (prepared TFDS directories).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from typing import Any, Protocol, runtime_checkable

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


def check_split(source_name: str, split: str, split_names: Sequence[str]) -> None:
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
