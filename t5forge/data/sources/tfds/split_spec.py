"""TFDS's split strings (`train`, `train[:90%]`, `validation[:100]`, `train[10:20]`,
`train[1shard:]`, `train[:5]+test[-3:]`, `all`) turned into the records to read per shard.

The arithmetic is TFDS's (`tensorflow_datasets/core/splits.py`): a percentage rounds to the
closest example (Python's `round`), negative bounds count from the end, a bound beyond the
split is an error, and a slice becomes a skip/take per shard file.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping

from t5forge.data.sources.tfds.dataset_dir import SplitFiles
from t5forge.errors import DataError

_SUB_SPEC = re.compile(r"^(?P<split>[\w-]+)(\[(?P<selector>[\d\w%:.-]+)\])?$")
_BOUND = re.compile(r"^((?P<value>-?[\d_.]+)(?P<unit>%|shard)?)?$")
_HELP = "see https://www.tensorflow.org/datasets/splits"


@dataclasses.dataclass(frozen=True)
class FileSlice:
    """Records [skip, skip + take) of one shard file, which dataset_info.json says holds
    `examples_in_shard` records (None where no dataset_info.json speaks for the file)."""

    path: str
    skip: int
    take: int
    examples_in_shard: int | None = None

    @property
    def reaches_end(self) -> bool:
        """Whether the slice reads to the shard's recorded end (TFDS reads it with no take)."""
        return (
            self.examples_in_shard is not None and self.skip + self.take == self.examples_in_shard
        )


def _bounds(sub_spec: str, split: SplitFiles) -> tuple[int, int]:
    """[start, stop) of a `name[selector]` in the split's examples, as TFDS computes them."""
    selector = _SUB_SPEC.match(sub_spec)["selector"]
    total = split.num_examples
    if selector is None:
        return 0, total
    parts = selector.split(":")
    parsed = [_BOUND.match(part) for part in parts]
    if len(parts) > 2 or not all(parsed) or not any(parts):
        raise DataError(f"split {sub_spec!r} is not a TFDS split slice; {_HELP}")
    if len(parts) == 1:
        if parsed[0]["unit"] != "shard":
            raise DataError(f"split {sub_spec!r}: write a slice such as [:10] or [:10%]")
        unit, start_text = "shard", parsed[0]["value"]
        stop_text = str(int(start_text) + 1)
    else:
        unit = parsed[0]["unit"] or parsed[1]["unit"] or "abs"
        start_text, stop_text = parsed[0]["value"], parsed[1]["value"]
    number = float if unit == "%" else int
    start = None if start_text is None else number(start_text)
    stop = None if stop_text is None else number(stop_text)
    if unit == "%":
        start = 0 if start is None else int(round(start * total / 100.0))
        stop = total if stop is None else int(round(stop * total / 100.0))
    elif unit == "shard":
        lengths = split.shard_lengths
        start = 0 if start is None else sum(lengths[:start])
        if stop is not None and stop <= 0:
            stop = len(lengths) + stop
        stop = total if stop is None else sum(lengths[:stop])
    else:
        start = 0 if start is None else start
        stop = total if stop is None else stop
    if abs(start) > total or abs(stop) > total:
        raise DataError(
            f"split {sub_spec!r} asks for examples beyond the {total} that split "
            f"{split.name!r} has; {_HELP}"
        )
    return (total + start if start < 0 else start), (total + stop if stop < 0 else stop)


def _slices_of(split: SplitFiles, start: int, stop: int) -> list[FileSlice]:
    slices, offset = [], 0
    for path, length in zip(split.paths, split.shard_lengths):
        skip = max(0, start - offset)
        take = min(stop, offset + length) - max(start, offset)
        if take > 0:
            slices.append(FileSlice(path, skip, take, length))
        offset += length
    return slices


def file_slices(spec: str, splits: Mapping[str, SplitFiles], dataset: str) -> list[FileSlice]:
    """The shard slices a split string reads, in reading order."""
    slices: list[FileSlice] = []
    for sub_spec in re.split(r"\s*\+\s*", spec.strip()):
        match = _SUB_SPEC.match(sub_spec)
        if not match:
            raise DataError(f"split {spec!r} of {dataset} is not a TFDS split string; {_HELP}")
        name = match["split"]
        if name == "all":
            if match["selector"]:
                raise DataError(f"split {spec!r}: TFDS does not slice 'all'; slice each split")
            for split in splits.values():
                slices += _slices_of(split, 0, split.num_examples)
            continue
        if name not in splits:
            raise DataError(
                f"{dataset} has no split {name!r} (in {spec!r}); splits: {', '.join(splits)}"
            )
        slices += _slices_of(splits[name], *_bounds(sub_spec, splits[name]))
    return slices


def num_examples(slices: list[FileSlice]) -> int:
    return sum(s.take for s in slices)
