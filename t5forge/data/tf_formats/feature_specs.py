"""TensorFlow-free `tf.io.FixedLenFeature`, `FixedLenSequenceFeature`, `VarLenFeature` and
TensorFlow's dtype names, so a SeqIO feature description (`{'inputs':
tf.io.FixedLenFeature([], tf.string)}`) or a `seqio.Feature(dtype=tf.int32)` can be written
without TensorFlow. The real TensorFlow objects work as well: the parser reads only `shape`,
`dtype.name`, `default_value` and `allow_missing`. tf.Example itself holds only tf.string,
tf.int64 and tf.float32.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import numpy as np


@dataclasses.dataclass(frozen=True)
class DType:
    """A tf.Example value type, named as TensorFlow names it."""

    name: str

    @property
    def as_numpy_dtype(self):
        """The numpy type, as TensorFlow's DType gives it (object for tf.string)."""
        if self.name == "string":
            return np.object_
        if self.name == "bfloat16":
            import ml_dtypes

            return ml_dtypes.bfloat16
        return np.dtype(self.name).type

    def __repr__(self) -> str:
        return f"tf.{self.name}"


string = DType("string")
bool = DType("bool")  # noqa: A001 - TensorFlow's name, read as tf.bool
int8, int16, int32, int64 = (DType(f"int{bits}") for bits in (8, 16, 32, 64))
uint8 = DType("uint8")
float16, float32, float64 = (DType(f"float{bits}") for bits in (16, 32, 64))
bfloat16 = DType("bfloat16")


class FixedLenFeature(NamedTuple):
    """A feature with exactly prod(shape) values (or `default_value` when absent)."""

    shape: Any
    dtype: DType
    default_value: Any = None


class FixedLenSequenceFeature(NamedTuple):
    """Any number of values of `shape` each, read as an array [n, *shape]; absent is an error
    unless `allow_missing` (then n = 0)."""

    shape: Any
    dtype: DType
    allow_missing: Any = False
    default_value: Any = None


class VarLenFeature(NamedTuple):
    """A feature with any number of values, read as a 1-D array (TF's sparse tensor, densified)."""

    dtype: DType
