"""Reading TensorBoard event files back in tests (TFRecord: a length (8 bytes), its CRC (4), the
event proto, its CRC (4)), with tensorboardX's protos: no TensorFlow needed."""

import pathlib
import struct
from collections.abc import Iterator
from typing import Any


def summary_values(directory: pathlib.Path) -> Iterator[tuple[int, Any]]:
    """**Yields:** `(step, value)` for every summary value (`value.tag`, `value.simple_value`,
    `value.image`) of every event file in `directory`, file by file in name order."""
    from tensorboardX.proto.event_pb2 import Event

    for path in sorted(pathlib.Path(directory).glob("events.out.tfevents.*")):
        data, i = path.read_bytes(), 0
        while i < len(data):
            (n,) = struct.unpack("<Q", data[i : i + 8])
            event = Event.FromString(data[i + 12 : i + 12 + n])
            i += 16 + n
            for value in event.summary.value:
                yield event.step, value
