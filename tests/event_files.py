"""Reads TensorBoard event files in tests, without TensorFlow or TensorBoard: the tests check
that a run's events hold the scalars it logged (t5forge itself only writes them)."""

import struct
from pathlib import Path

from tensorboardX.proto import event_pb2


def read_event_scalars(path) -> dict[str, list[tuple[int, float]]]:
    """{tag: [(step, value)]} from a TensorBoard event file, without TensorFlow or TensorBoard.

    Event files are TFRecord-framed Event protos: 8-byte length, 4-byte CRC, data, 4-byte CRC.
    """
    scalars: dict[str, list[tuple[int, float]]] = {}
    data, offset = Path(path).read_bytes(), 0
    while offset < len(data):
        (length,) = struct.unpack("<Q", data[offset : offset + 8])
        event = event_pb2.Event.FromString(data[offset + 12 : offset + 12 + length])
        offset += 12 + length + 4
        for value in event.summary.value:
            scalars.setdefault(value.tag, []).append((event.step, value.simple_value))
    return scalars
