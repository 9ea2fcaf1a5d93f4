"""TFDS feature connectors (`features.json`) decoded from tf.Example values, as TFDS gives them.

TFDS stores each example as a tf.Example whose keys are the flattened feature paths
(`meta/inner/weight`, `spans/word`, a Translation's `de` and `en`) and whose values are flat
bytes / float / int64 lists; `features.json` says how to rebuild the nested structure, the
dtypes and the shapes. The values come back as `tfds.as_numpy` gives them - numpy scalars and
arrays, nested dicts - with one difference that t5forge's preprocessors rely on: Text is a
Python `str` (TFDS gives UTF-8 `bytes`); a string Tensor stays `bytes`. Both forms of
features.json are read: today's (TFDS 4.6 and later) and the `{"type", "content"}` one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import numpy as np

from t5forge.errors import DataError

_KINDS = (
    "FeaturesDict, Text, ClassLabel, Scalar, Tensor, Sequence, Translation and "
    "TranslationVariableLanguages"
)


def _join(prefix: str, name: str) -> str:
    return f"{prefix}/{name}" if prefix else name


class _Leaf:
    """One stored tensor: a tf.Example key, a dtype and a shape (outer Sequence axes first)."""

    def __init__(self, key: str, dtype: str, shape: tuple[int, ...], text: bool = False):
        if sum(1 for size in shape if size < 0) > 1:
            raise DataError(
                f"TFDS feature {key!r} is ragged (shape {shape} has several unknown sizes); "
                f"t5forge reads {_KINDS} with at most one unknown dimension"
            )
        self.key, self.shape, self.text = key, shape, text
        self.is_string = dtype == "string"
        if not self.is_string:
            try:
                self.dtype = np.dtype(dtype)
            except TypeError:
                raise DataError(
                    f"TFDS feature {key!r} has dtype {dtype!r}, unknown to numpy"
                ) from None

    def decode(self, flat: Mapping[str, Any], where: str):
        if self.key not in flat:
            raise DataError(f"{where}: no feature {self.key!r}, which features.json declares")
        stored = flat[self.key]
        if self.is_string:
            values = [self._text(v, where) for v in stored] if self.text else list(stored)
            array = np.empty(len(values), dtype=object)
            array[:] = values
        else:
            array = np.asarray(stored).astype(self.dtype)
        try:
            array = array.reshape(self.shape)
        except ValueError:
            raise DataError(
                f"{where}: feature {self.key!r} has {array.size} values, which do not fit "
                f"its shape {self.shape} in features.json"
            ) from None
        return array[()] if not self.shape else array

    def _text(self, value: bytes, where: str) -> str:
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError as e:
            raise DataError(
                f"{where}: Text feature {self.key!r} is not UTF-8 (byte {e.start}); "
                "the dataset was not written by TFDS's Text feature"
            ) from None


class _Dict:
    """A FeaturesDict (or a fixed-language Translation): name -> sub-feature."""

    def __init__(self, children: Mapping[str, Any]):
        self.children = dict(children)

    def decode(self, flat: Mapping[str, Any], where: str) -> dict[str, Any]:
        return {name: child.decode(flat, where) for name, child in self.children.items()}


def _dimensions(tensor: Mapping[str, Any]) -> tuple[int, ...]:
    return tuple(int(size) for size in tensor.get("shape", {}).get("dimensions", []))


_PROTO_FIELDS = {
    "FeaturesDict": "featuresDict",
    "Text": "text",
    "ClassLabel": "classLabel",
    "Tensor": "tensor",
    "Scalar": "tensor",
    "Sequence": "sequence",
    "Translation": "translation",
    "TranslationVariableLanguages": "translation",
}


def _current_form(node: Mapping[str, Any]) -> Mapping[str, Any]:
    """A node as TFDS before 4.6 wrote it (`{"type", "content"}`, what datasets prepared in
    2020-2022 hold) in today's form; today's nodes pass through."""
    if "type" not in node:
        return node
    kind = node["type"].rsplit(".", 1)[-1]
    content = node.get("content") or {}
    current: dict[str, Any] = {"pythonClassName": node["type"]}
    if kind not in _PROTO_FIELDS:
        return current
    if node.get("proto_cls"):  # the content is already today's message for that kind
        current[_PROTO_FIELDS[kind]] = json.loads(content) if isinstance(content, str) else content
    elif kind == "FeaturesDict":
        current["featuresDict"] = {"features": dict(content)}
    elif kind in ("Tensor", "Scalar"):
        dimensions = [-1 if size is None else size for size in content.get("shape", [])]
        current["tensor"] = {
            "shape": {"dimensions": dimensions},
            "dtype": content["dtype"],
            "encoding": content.get("encoding", "none"),
        }
    elif kind == "Sequence":
        length = content.get("length")
        current["sequence"] = {
            "feature": content["feature"],
            "length": -1 if length is None else length,
        }
    else:
        current[_PROTO_FIELDS[kind]] = dict(content)
    return current


def build_decoder(spec: Mapping[str, Any], key: str = "", outer: tuple[int, ...] = ()):
    """The decoder of one features.json node; `outer` holds the axes of enclosing Sequences."""
    spec = _current_form(spec)
    kind = spec.get("pythonClassName", "").rsplit(".", 1)[-1]
    if kind == "FeaturesDict":
        features = spec["featuresDict"]["features"]
        return _Dict(
            {name: build_decoder(sub, _join(key, name), outer) for name, sub in features.items()}
        )
    if kind == "Text":
        return _Leaf(key, "string", outer, text=True)
    if kind == "ClassLabel":
        return _Leaf(key, "int64", outer)
    if kind in ("Tensor", "Scalar"):
        tensor = spec["tensor"]
        if tensor.get("encoding", "none") != "none":
            raise DataError(
                f"TFDS feature {key!r} is a Tensor stored with encoding "
                f"{tensor['encoding']!r}; t5forge reads unencoded tensors only"
            )
        return _Leaf(key, tensor["dtype"], outer + _dimensions(tensor))
    if kind == "Translation":
        languages = spec["translation"]["languages"]
        return _Dict(
            {lang: _Leaf(_join(key, lang), "string", outer, text=True) for lang in languages}
        )
    if kind == "TranslationVariableLanguages":
        return _Dict(
            {
                "language": _Leaf(_join(key, "language"), "string", outer + (-1,), text=True),
                "translation": _Leaf(_join(key, "translation"), "string", outer + (-1,), text=True),
            }
        )
    if kind == "Sequence":
        sequence = spec["sequence"]
        return build_decoder(sequence["feature"], key, outer + (int(sequence.get("length", -1)),))
    name = spec.get("pythonClassName") or "a feature features.json does not name"
    raise DataError(f"TFDS feature {key or '(top level)'!r} is {name}; t5forge reads {_KINDS}")


class ExampleDecoder:
    """A dataset's features.json as a picklable `decoder(flat_values, where) -> example`."""

    def __init__(self, features: Mapping[str, Any]):
        self._root = build_decoder(features)
        if not isinstance(self._root, _Dict):
            raise DataError(
                "the dataset's top-level TFDS feature is not a FeaturesDict or Translation; "
                "t5forge needs named features to build examples"
            )

    def __call__(self, flat: Mapping[str, Any], where: str) -> dict[str, Any]:
        return self._root.decode(flat, where)
