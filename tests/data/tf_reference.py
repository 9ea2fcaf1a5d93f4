"""The fixtures that TFDS, TensorFlow and SeqIO wrote (tests/data/tfds_fixtures, made by its
make_fixtures.py in a side environment) and the comparison of t5forge's decoded values with
the values they read back.

TFDS gives Text as UTF-8 bytes where t5forge gives `str`; everything else must match in
value, numpy dtype and shape. TFDS's `data_source` (the ArrayRecord reference) gives Python
lists and scalars where `as_numpy` gives numpy arrays and scalars: against it the values
must match element by element.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np

FIXTURES = Path(__file__).parent / "tfds_fixtures"
FORMATS = ("tfrecord", "array_record")


def load_reference(name: str) -> dict:
    with open(FIXTURES / name, encoding="utf-8") as f:
        return json.load(f)


def untag(value):
    """make_fixtures.tagged, inverted: the values exactly as TFDS handed them out."""
    if isinstance(value, dict) and "bytes" in value:
        return base64.b64decode(value["bytes"])
    if isinstance(value, dict) and "ndarray" in value:
        dtype = np.dtype(value["dtype"])
        flat = [untag(v) if isinstance(v, dict) else v for v in value["ndarray"]]
        array = np.empty(len(flat), dtype=object) if dtype.kind == "O" else np.array(flat, dtype)
        if dtype.kind == "O":
            array[:] = flat
        return array.reshape(value["shape"])
    if isinstance(value, dict) and "scalar" in value:
        return np.dtype(value["dtype"]).type(value["scalar"])
    if isinstance(value, dict) and "python" in value:
        return value["python"]
    if isinstance(value, dict) and "list" in value:
        return [untag(v) for v in value["list"]]
    return {key: untag(v) for key, v in value.items()}


def assert_same(ours, theirs, where: str = "example") -> None:
    """t5forge's decoded value equals TFDS's (see the module docstring for the one exception)."""
    if isinstance(theirs, dict):
        assert isinstance(ours, dict) and ours.keys() == theirs.keys(), (where, ours, theirs)
        for key in theirs:
            assert_same(ours[key], theirs[key], f"{where}/{key}")
    elif isinstance(theirs, bytes):
        assert ours == theirs or (isinstance(ours, str) and ours.encode() == theirs), (
            where,
            ours,
            theirs,
        )
    elif isinstance(theirs, np.ndarray):
        assert isinstance(ours, np.ndarray), (where, type(ours))
        assert (ours.dtype, ours.shape) == (theirs.dtype, theirs.shape), (where, ours, theirs)
        if theirs.dtype.kind == "O":
            for i, (mine, other) in enumerate(zip(ours.ravel(), theirs.ravel())):
                assert_same(mine, other, f"{where}[{i}]")
        else:
            np.testing.assert_array_equal(ours, theirs, err_msg=where)
    elif isinstance(theirs, np.generic):
        assert isinstance(ours, np.generic) and ours.dtype == theirs.dtype, (where, ours, theirs)
        assert ours == theirs, (where, ours, theirs)
    elif isinstance(theirs, list):
        assert len(ours) == len(theirs), (where, ours, theirs)
        for i, (mine, other) in enumerate(zip(ours, theirs)):
            assert_same(mine, other, f"{where}[{i}]")
    else:
        assert ours == theirs, (where, ours, theirs)


def assert_all_same(ours: list, theirs: list, where: str) -> None:
    assert len(ours) == len(theirs), (where, len(ours), len(theirs))
    for index, (mine, other) in enumerate(zip(ours, theirs)):
        assert_same(mine, other, f"{where} #{index}")


def tfrecord_frames(path) -> list[bytes]:
    """The file's records, each in its full TFRecord frame (what TensorFlow's writer wrote), so
    a test can reorder, drop or splice them and keep every checksum valid."""
    data, frames, offset = Path(path).read_bytes(), [], 0
    while offset < len(data):
        end = offset + 16 + int.from_bytes(data[offset : offset + 8], "little")
        frames.append(data[offset:end])
        offset = end
    return frames
