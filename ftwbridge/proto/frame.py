"""Frames: the plaintext inside one transport message (PROTOCOL.md part A).

Layout: byte 0 version (1), byte 1 lane (0 control, 1 bulk), byte 2 flags (0x02 truncated),
byte 3 reserved (0), bytes 4-5 the envelope's length (u16 big-endian), the envelope, then zero
padding up to the bucket: lane 0 one bucket per session (256 or 512), lane 1 the smallest of
1024, 4096, 16384 that fits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from .errors import LocalProtocolError, RemoteProtocolError

VERSION: Final = 1
HEADER_BYTES: Final = 6
LANE_CONTROL: Final = 0
LANE_BULK: Final = 1
FLAG_TRUNCATED: Final = 0x02
CONTROL_BUCKETS: Final = (256, 512)
DEFAULT_CONTROL_BUCKET: Final = 512
BULK_BUCKETS: Final = (1024, 4096, 16384)
MAX_FRAME_BYTES: Final = BULK_BUCKETS[-1]
MAX_ENVELOPE_BYTES: Final = MAX_FRAME_BYTES - HEADER_BYTES
"""The largest envelope one frame carries (16,378 bytes); larger answers must page."""


@dataclass(frozen=True, slots=True)
class Frame:
    """A decoded frame: `lane` (0 or 1), `flags` (bit 0x02 truncated), `payload` (envelope bytes)."""

    lane: int
    flags: int
    payload: bytes

    @property
    def truncated(self) -> bool:
        """True when the sender marked the envelope as cut short (flag 0x02)."""
        return bool(self.flags & FLAG_TRUNCATED)


def bucket_for(lane: int, length: int, control_bucket: int = DEFAULT_CONTROL_BUCKET) -> int:
    """The frame size in bytes for an envelope of `length` bytes on `lane`.

    Raises:
        LocalProtocolError: unknown lane or bucket, or an envelope that does not fit the lane.
    """
    need = HEADER_BYTES + length
    if lane == LANE_CONTROL:
        if control_bucket not in CONTROL_BUCKETS:
            raise LocalProtocolError(f"control bucket must be one of {CONTROL_BUCKETS}")
        if need > control_bucket:
            raise LocalProtocolError(f"{length} bytes do not fit the control bucket")
        return control_bucket
    if lane == LANE_BULK:
        for size in BULK_BUCKETS:
            if need <= size:
                return size
        raise LocalProtocolError(f"{length} bytes do not fit the largest bulk bucket")
    raise LocalProtocolError(f"unknown lane {lane}")


def lane_for(length: int, control_bucket: int = DEFAULT_CONTROL_BUCKET) -> int:
    """The lane an envelope of `length` bytes takes: control when it fits, bulk otherwise."""
    return LANE_CONTROL if HEADER_BYTES + length <= control_bucket else LANE_BULK


def encode_frame(
    payload: bytes,
    *,
    lane: int | None = None,
    flags: int = 0,
    control_bucket: int = DEFAULT_CONTROL_BUCKET,
) -> bytes:
    """Frame `payload` (envelope bytes) on `lane` (chosen by size when None), zero-padded.

    Raises:
        LocalProtocolError: as `bucket_for`, or flags outside one byte.
    """
    if lane is None:
        lane = lane_for(len(payload), control_bucket)
    size = bucket_for(lane, len(payload), control_bucket)
    if not 0 <= flags <= 0xFF:
        raise LocalProtocolError("flags must fit one byte")
    head = bytes((VERSION, lane, flags, 0)) + len(payload).to_bytes(2, "big")
    return head + payload + bytes(size - HEADER_BYTES - len(payload))


def decode_frame(data: bytes) -> Frame:
    """Decode one frame (bytes); padding is ignored.

    Raises:
        RemoteProtocolError: short header, unknown version or lane, or a length past the end.
    """
    if len(data) < HEADER_BYTES:
        raise RemoteProtocolError("frame shorter than its header")
    if data[0] != VERSION:
        raise RemoteProtocolError(f"unknown frame version {data[0]}")
    if data[1] not in (LANE_CONTROL, LANE_BULK):
        raise RemoteProtocolError(f"unknown lane {data[1]}")
    length = int.from_bytes(data[4:6], "big")
    if HEADER_BYTES + length > len(data):
        raise RemoteProtocolError("frame length runs past the data")
    return Frame(data[1], data[2], bytes(data[HEADER_BYTES : HEADER_BYTES + length]))
