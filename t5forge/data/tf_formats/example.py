"""`tf.train.Example` records decoded without TensorFlow.

An Example is a protobuf: a map from feature name to one of a bytes, float or int64 list.
The message classes are built here from a descriptor equal to TensorFlow's `example.proto`
and `feature.proto` (same field numbers and types), in a private descriptor pool, so the
`protobuf` runtime's C parser does the work and a real TensorFlow imported in the same
process is not disturbed.
"""

from __future__ import annotations

import functools

import numpy as np
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError

from t5forge.errors import DataError

_PACKAGE = "private_tf_example"
_Field = descriptor_pb2.FieldDescriptorProto


def _field(name, number, kind, label=_Field.LABEL_OPTIONAL, type_name=None, oneof=None):
    field = _Field(name=name, number=number, type=kind, label=label)
    if type_name:
        field.type_name = f".{_PACKAGE}.{type_name}"
    if oneof is not None:
        field.oneof_index = oneof
    return field


def _list_message(name: str, kind: int) -> descriptor_pb2.DescriptorProto:
    value = _field("value", 1, kind, _Field.LABEL_REPEATED)
    value.options.packed = kind != _Field.TYPE_BYTES
    return descriptor_pb2.DescriptorProto(name=name, field=[value])


@functools.cache
def _example_class():
    """The Example message class, built once (feature.proto / example.proto, proto3)."""
    proto = descriptor_pb2.FileDescriptorProto(
        name="private_tf_example.proto", package=_PACKAGE, syntax="proto3"
    )
    proto.message_type.extend(
        [
            _list_message("BytesList", _Field.TYPE_BYTES),
            _list_message("FloatList", _Field.TYPE_FLOAT),
            _list_message("Int64List", _Field.TYPE_INT64),
        ]
    )
    feature = proto.message_type.add(name="Feature")
    feature.oneof_decl.add(name="kind")
    for number, name, type_name in (
        (1, "bytes_list", "BytesList"),
        (2, "float_list", "FloatList"),
        (3, "int64_list", "Int64List"),
    ):
        feature.field.append(
            _field(name, number, _Field.TYPE_MESSAGE, type_name=type_name, oneof=0)
        )
    features = proto.message_type.add(name="Features")
    entry = features.nested_type.add(name="FeatureEntry")
    entry.options.map_entry = True
    entry.field.extend(
        [
            _field("key", 1, _Field.TYPE_STRING),
            _field("value", 2, _Field.TYPE_MESSAGE, type_name="Feature"),
        ]
    )
    features.field.append(
        _field("feature", 1, _Field.TYPE_MESSAGE, _Field.LABEL_REPEATED, "Features.FeatureEntry")
    )
    example = proto.message_type.add(name="Example")
    example.field.append(_field("features", 1, _Field.TYPE_MESSAGE, type_name="Features"))
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{_PACKAGE}.Example"))


FeatureValues = list[bytes] | np.ndarray


def parse_example(serialized: bytes, where: str) -> dict[str, FeatureValues]:
    """Feature name -> its values: a list of bytes, a float32 array or an int64 array.

    A feature with no kind set (TensorFlow writes one for an empty list of unknown type)
    comes back as an empty list. `where` names the record in the error a damaged one gets.
    """
    example = _example_class()()
    try:
        example.ParseFromString(serialized)
    except DecodeError as e:
        raise DataError(
            f"{where}: not a tf.train.Example ({e}); check that the file holds tf.Examples"
        ) from None
    values: dict[str, FeatureValues] = {}
    for name, feature in example.features.feature.items():
        kind = feature.WhichOneof("kind")
        if kind == "bytes_list":
            values[name] = list(feature.bytes_list.value)
        elif kind == "float_list":
            values[name] = np.array(feature.float_list.value, dtype=np.float32)
        elif kind == "int64_list":
            values[name] = np.array(feature.int64_list.value, dtype=np.int64)
        else:
            values[name] = []
    return values
