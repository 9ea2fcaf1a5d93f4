"""`HuggingFaceSource`: a task's rows from the Hugging Face `datasets` library.

Local JSON/CSV/Parquet/text files (the format from the extension) or a Hub dataset, loaded
when first needed; `streaming=True` gives re-iterable splits for corpora that do not fit on
disk.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping

from t5forge.data.sources import Example, Patterns, check_split, expand_patterns
from t5forge.errors import DataError


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
        check_split(f"Hugging Face dataset {self.path!r}", split, self.split_names)
        data = self._load()[split]
        return _StreamingSplit(data) if self.streaming else data

    def num_examples(self, split: str) -> int | None:
        check_split(f"Hugging Face dataset {self.path!r}", split, self.split_names)
        data = self._load()[split]
        if not self.streaming:
            return len(data)
        info = getattr(data, "info", None)
        splits = getattr(info, "splits", None) or {}
        return splits[split].num_examples if split in splits else None

    def __repr__(self):
        return f"HuggingFaceSource({self.path!r}, streaming={self.streaming})"
