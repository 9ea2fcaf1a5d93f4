"""tf.Example values shaped by a SeqIO feature description, as `tf.io.parse_single_example`
shapes them - as numpy: a FixedLenFeature is an array of its shape (a numpy scalar for
shape []), a FixedLenSequenceFeature an array [n, *shape], a VarLenFeature the 1-D array of
its values (TF's sparse tensor densified), and a string a Python `str` (t5forge's
preprocessors work on text; TF gives bytes).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from t5forge.data.tf_example import parse_example
from t5forge.data.tfexample_features import (
    FixedLenFeature,
    FixedLenSequenceFeature,
    VarLenFeature,
)
from t5forge.errors import DataError

_NUMPY = {"int64": np.int64, "float32": np.float32}
_STORED_AS = {"string": list, "int64": np.int64, "float32": np.float32}


def _dtype_name(name: str, spec: Any) -> str:
    dtype = getattr(getattr(spec, "dtype", None), "name", None)
    if dtype not in _STORED_AS:
        raise DataError(
            f"feature description {name!r}: dtype {getattr(spec, 'dtype', None)!r}; tf.Example "
            "holds tf.string, tf.int64 or tf.float32"
        )
    return dtype


_KINDS = {cls.__name__: cls for cls in (FixedLenFeature, FixedLenSequenceFeature, VarLenFeature)}


def _kind(name: str, spec: Any) -> str:
    """The description's class name: t5forge's stand-ins and TensorFlow's own share them."""
    kind = type(spec).__name__
    if kind not in _KINDS:
        raise DataError(
            f"feature description {name!r} is {kind}; use tf.io.FixedLenFeature, "
            "tf.io.FixedLenSequenceFeature or tf.io.VarLenFeature"
        )
    return kind


def check_description(description: Mapping[str, Any]) -> None:
    """Refuses what parse_single_example would refuse, before any file is read."""
    for name, spec in description.items():
        _kind(name, spec)
        _dtype_name(name, spec)


def _as_array(values: Any, dtype: str, name: str, where: str) -> np.ndarray:
    if dtype == "string":
        if isinstance(values, np.ndarray) and values.size:
            raise DataError(f"{where}: feature {name!r} holds numbers, described as tf.string")
        array = np.empty(len(values), dtype=object)
        for i, value in enumerate(values):
            try:
                array[i] = value.decode("utf-8")
            except UnicodeDecodeError:
                raise DataError(
                    f"{where}: feature {name!r} is not UTF-8 text; t5forge reads tf.string "
                    "features as text"
                ) from None
        return array
    if not isinstance(values, np.ndarray):
        if values:
            raise DataError(f"{where}: feature {name!r} holds bytes, described as tf.{dtype}")
        values = np.zeros(0)
    elif values.dtype != _STORED_AS[dtype] and values.size:
        raise DataError(f"{where}: feature {name!r} holds {values.dtype}, described as tf.{dtype}")
    return values.astype(_NUMPY[dtype])


def _sequence(spec: Any, stored: Any, dtype: str, name: str, where: str) -> np.ndarray:
    shape = tuple(int(size) for size in spec.shape)
    if stored is None and not spec.allow_missing:
        raise DataError(
            f"{where}: no feature {name!r}, which the feature description requires "
            "(FixedLenSequenceFeature(allow_missing=True) allows its absence)"
        )
    array = _as_array([] if stored is None else stored, dtype, name, where)
    width = int(np.prod(shape))
    if width == 0 or array.size % width:
        raise DataError(
            f"{where}: feature {name!r} has {array.size} values, not a whole number of "
            f"its FixedLenSequenceFeature shape {list(shape)}"
        )
    return array.reshape((-1, *shape))


def _fixed(spec: Any, stored: Any, dtype: str, name: str, where: str):
    shape = tuple(int(size) for size in spec.shape)
    if stored is None:
        if spec.default_value is None:
            raise DataError(
                f"{where}: no feature {name!r}, which the feature description requires "
                "(give FixedLenFeature a default_value to allow its absence)"
            )
        default = np.asarray(spec.default_value, dtype=object if dtype == "string" else None)
        array = np.broadcast_to(default, shape).copy()
        if dtype != "string":
            array = array.astype(_NUMPY[dtype])
    else:
        array = _as_array(stored, dtype, name, where)
        if array.size != int(np.prod(shape)):
            raise DataError(
                f"{where}: feature {name!r} has {array.size} values where its "
                f"FixedLenFeature shape {list(shape)} needs {int(np.prod(shape))}"
            )
        array = array.reshape(shape)
    return array[()] if not shape else array


def parse_with_description(
    serialized: bytes, description: Mapping[str, Any], where: str
) -> dict[str, Any]:
    """One serialized tf.Example -> the described features (others are ignored, as in TF)."""
    stored = parse_example(serialized, where)
    example = {}
    for name, spec in description.items():
        dtype, kind = _dtype_name(name, spec), _kind(name, spec)
        if kind == "VarLenFeature":
            example[name] = _as_array(stored.get(name, []), dtype, name, where)
        elif kind == "FixedLenSequenceFeature":
            example[name] = _sequence(spec, stored.get(name), dtype, name, where)
        else:
            example[name] = _fixed(spec, stored.get(name), dtype, name, where)
    return example
