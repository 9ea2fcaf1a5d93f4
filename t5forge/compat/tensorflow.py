"""`import tensorflow as tf` in a task module: the few TensorFlow names a task module uses to
describe data (tf.io.FixedLenFeature, tf.io.VarLenFeature, dtypes such as tf.int32,
tf.data.TFRecordDataset as a reader), and for every other name one error, when it is called,
naming the task-module function that called it and what to write instead (t5forge runs no
TensorFlow graph: preprocessors are plain Python over dicts of numpy values and str)."""

from __future__ import annotations

import importlib
import sys
import types

from t5forge.errors import DataError

# Names forwarded to t5forge's TensorFlow-free tf.Example description module.
_FEATURES_MODULE = "t5forge.data.tf_formats.feature_specs"
_DESCRIPTION_NAMES = ("FixedLenFeature", "VarLenFeature", "FixedLenSequenceFeature")
_DTYPE_NAMES = (
    "string",
    "int64",
    "int32",
    "int16",
    "int8",
    "uint8",
    "float32",
    "float64",
    "float16",
    "bfloat16",
    "bool",
)

_COMPAT_NAMES = ("v1", "v2")
# TensorFlow names a task module passes as values, with the t5forge function doing that job:
# tf.data.TFRecordDataset as TFExampleDataSource's reader_cls reads records from a path, with
# its compression_type / buffer_size / num_parallel_reads (functools.partial of it included).
_FORWARDED = {
    "tf.data.TFRecordDataset": ("t5forge.data.tf_formats.record_dataset", "tfrecord_dataset")
}


__path__: list[str] = []  # a package to the import system: its submodules are stand-ins too


def _caller() -> str:
    """'to_inputs (tasks.py:12)': the innermost frame outside t5forge that made the call."""
    package = __name__.partition(".")[0]
    frame = sys._getframe(2)
    while frame is not None and frame.f_globals.get("__name__", "").partition(".")[0] == package:
        frame = frame.f_back
    if frame is None:
        return "a task module function"
    code = frame.f_code
    return f"{code.co_name} ({code.co_filename.rsplit('/', 1)[-1]}:{frame.f_lineno})"


class TensorFlowOp:
    """A TensorFlow name t5forge does not run: usable as a value (tf.data.AUTOTUNE as an
    argument), an error when called."""

    def __init__(self, path: str):
        self._path = path

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        path = f"{self._path}.{name}"
        if path in _FORWARDED:
            module, attribute = _FORWARDED[path]
            return getattr(importlib.import_module(module), attribute)
        return TensorFlowOp(path)

    def __call__(self, *args, **kwargs):
        raise DataError(
            f"{_caller()} calls {self._path}, a TensorFlow op t5forge does not run; write "
            "it as plain Python over the example dict (numpy arrays, str), e.g. an f-string "
            "for tf.strings.join, np.concatenate for tf.concat (docs/tasks-and-data.md)"
        )

    def __repr__(self) -> str:
        return f"<TensorFlow name {self._path} (t5forge stand-in)>"


class _Namespace(types.ModuleType):
    """tf.io, tf.compat.v2, ...: forwards what t5forge has, stands in for the rest."""

    def __init__(self, path: str):
        super().__init__(path)
        self._path = path

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        if name in _DESCRIPTION_NAMES or name in _DTYPE_NAMES:
            return getattr(importlib.import_module(_FEATURES_MODULE), name)
        if name in _COMPAT_NAMES:
            return sys.modules[__name__]
        if name == "io":
            return io
        if name == "compat":
            return compat
        return TensorFlowOp(f"tf.{name}" if self._path == "tf" else f"{self._path}.{name}")


io = _Namespace("tf.io")
compat = _Namespace("tf.compat")


def __getattr__(name: str):
    return _Namespace("tf").__getattr__(name)
