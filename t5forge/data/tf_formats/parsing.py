"""tf.Example values shaped by a SeqIO feature description, as `tf.io.parse_single_example`
shapes them - as numpy: a FixedLenFeature is an array of its shape (a numpy scalar for
shape []), a FixedLenSequenceFeature an array [n, *shape], a VarLenFeature the 1-D array of
its values (TF's sparse tensor densified), and a string a Python `str` (t5forge's
preprocessors work on text; TF gives bytes).

The description is checked and compiled once (`ExampleParser`), so each record costs one
protobuf parse and a reshape per feature.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from t5forge.data.tf_formats.example import parse_example
from t5forge.data.tf_formats.feature_specs import (
    FixedLenFeature,
    FixedLenSequenceFeature,
    VarLenFeature,
)
from t5forge.errors import DataError

_NUMPY = {"int64": np.int64, "float32": np.float32}
_KINDS = {cls.__name__ for cls in (FixedLenFeature, FixedLenSequenceFeature, VarLenFeature)}


@dataclasses.dataclass(frozen=True)
class _Field:
    """One described feature, checked: its kind, tf.Example dtype, shape and default."""

    name: str
    kind: str
    dtype: str
    shape: tuple[int, ...] = ()
    default: Any = None
    allow_missing: bool = False

    @property
    def size(self) -> int:
        return math.prod(self.shape)


def _field(name: str, spec: Any) -> _Field:
    """Refuses what parse_single_example would refuse; TensorFlow's own specs work too (the
    class name and `shape`, `dtype.name`, `default_value`, `allow_missing` are all it reads)."""
    kind = type(spec).__name__
    if kind not in _KINDS:
        raise DataError(
            f"feature description {name!r} is {kind}; use tf.io.FixedLenFeature, "
            "tf.io.FixedLenSequenceFeature or tf.io.VarLenFeature"
        )
    dtype = getattr(getattr(spec, "dtype", None), "name", None)
    if dtype not in ("string", *_NUMPY):
        raise DataError(
            f"feature description {name!r}: dtype {getattr(spec, 'dtype', None)!r}; tf.Example "
            "holds tf.string, tf.int64 or tf.float32"
        )
    if kind == "VarLenFeature":
        return _Field(name, kind, dtype)
    shape = tuple(int(size) for size in spec.shape)
    default = spec.default_value
    if kind == "FixedLenFeature" and default is not None:
        default = np.asarray(default, dtype=object if dtype == "string" else _NUMPY[dtype])
        default = np.broadcast_to(default, shape)
    return _Field(name, kind, dtype, shape, default, bool(getattr(spec, "allow_missing", False)))


def _as_array(values: Any, field: _Field, where: str) -> np.ndarray:
    """A feature's stored list as an array of the described dtype (strings as str)."""
    if field.dtype == "string":
        if isinstance(values, np.ndarray) and values.size:
            raise DataError(
                f"{where}: feature {field.name!r} holds numbers, described as tf.string"
            )
        array = np.empty(len(values), dtype=object)
        try:
            array[:] = [value.decode("utf-8") for value in values]
        except UnicodeDecodeError:
            raise DataError(
                f"{where}: feature {field.name!r} is not UTF-8 text; t5forge reads tf.string "
                "features as text"
            ) from None
        return array
    wanted = _NUMPY[field.dtype]
    if not isinstance(values, np.ndarray):
        if values:
            raise DataError(
                f"{where}: feature {field.name!r} holds bytes, described as tf.{field.dtype}"
            )
        return np.zeros(0, wanted)
    if values.dtype != wanted and values.size:
        raise DataError(
            f"{where}: feature {field.name!r} holds {values.dtype}, described as tf.{field.dtype}"
        )
    return values.astype(wanted, copy=False)


def _absent(field: _Field, where: str, how_to_allow: str) -> DataError:
    return DataError(
        f"{where}: no feature {field.name!r}, which the feature description requires "
        f"({how_to_allow})"
    )


def _fixed(field: _Field, stored: Any, where: str):
    if stored is None:
        if field.default is None:
            raise _absent(field, where, "give FixedLenFeature a default_value to allow its absence")
        array = field.default.copy()
    else:
        array = _as_array(stored, field, where)
        if array.size != field.size:
            raise DataError(
                f"{where}: feature {field.name!r} has {array.size} values where its "
                f"FixedLenFeature shape {list(field.shape)} needs {field.size}"
            )
        array = array.reshape(field.shape)
    return array[()] if not field.shape else array


def _sequence(field: _Field, stored: Any, where: str) -> np.ndarray:
    if stored is None and not field.allow_missing:
        raise _absent(field, where, "FixedLenSequenceFeature(allow_missing=True) allows it")
    array = _as_array([] if stored is None else stored, field, where)
    if field.size == 0 or array.size % field.size:
        raise DataError(
            f"{where}: feature {field.name!r} has {array.size} values, not a whole number of "
            f"its FixedLenSequenceFeature shape {list(field.shape)}"
        )
    return array.reshape((-1, *field.shape))


class ExampleParser:
    """`parser(serialized, where)`: one tf.Example -> the described features (others are
    ignored, as in TF). Picklable, so grain worker processes can rebuild it."""

    def __init__(self, description: Mapping[str, Any]):
        self._fields = tuple(_field(name, spec) for name, spec in description.items())

    def __call__(self, serialized: bytes, where: str) -> dict[str, Any]:
        stored = parse_example(serialized, where)
        example = {}
        for field in self._fields:
            values = stored.get(field.name)
            if field.kind == "VarLenFeature":
                example[field.name] = _as_array([] if values is None else values, field, where)
            elif field.kind == "FixedLenSequenceFeature":
                example[field.name] = _sequence(field, values, where)
            else:
                example[field.name] = _fixed(field, values, where)
        return example
