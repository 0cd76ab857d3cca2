"""One side's channel of one Noise session after the handshake (PROTOCOL.md part A):
envelopes in, transport messages out, and back (frame, pad, seal / open, unpad, decode).
Both ends use it: the bridge's `session.AgentSession` and the stub box's responder."""

from __future__ import annotations

from .envelope import Envelope, decode_envelope
from .errors import RemoteProtocolError
from .frame import DEFAULT_CONTROL_BUCKET, LANE_BULK, decode_frame, encode_frame, lane_for
from .noise import Transport, TransportKeys


class Channel:
    """Envelope <-> transport message for one side of one session.

    Args:
        keys: the handshake's transport keys, from this side's point of view.
        control_bucket: lane 0's bucket for the session, 256 or 512 bytes.
    """

    def __init__(self, keys: TransportKeys, *, control_bucket: int = DEFAULT_CONTROL_BUCKET):
        self._transport = Transport(keys)
        self.control_bucket = control_bucket
        self.session_id = keys.handshake_hash

    def wrap(self, env: Envelope, *, bulk: bool = False, flags: int = 0) -> bytes:
        """One transport message carrying `env`; lane 1 when `bulk` or when lane 0 is too small.

        Raises:
            LocalProtocolError: an envelope over 16,378 bytes, or a spent `seq` space.
        """
        return self.wrap_encoded(env.encode(), bulk=bulk, flags=flags)

    def wrap_encoded(self, payload: bytes, *, bulk: bool = False, flags: int = 0) -> bytes:
        """As `wrap`, for an envelope already encoded (`Envelope.encode`'s bytes: a constant
        message encoded once, such as `hello`).

        Raises:
            LocalProtocolError: as `wrap`.
        """
        lane = LANE_BULK if bulk else lane_for(len(payload), self.control_bucket)
        frame = encode_frame(payload, lane=lane, flags=flags, control_bucket=self.control_bucket)
        return self._transport.seal(frame)

    def unwrap(self, message: bytes) -> Envelope | None:
        """The envelope in one transport message, or None when its frame or CBOR is undecodable.

        Raises:
            RemoteProtocolError: authentication failure, replay, or a message older than the window.
        """
        return self.unwrap_flagged(message)[0]

    def unwrap_flagged(self, message: bytes) -> tuple[Envelope | None, int]:
        """As `unwrap`, with the frame's flags (0x02: truncated, PROTOCOL.md parts A and F).

        Raises:
            RemoteProtocolError: as `unwrap`.
        """
        frame_bytes = self._transport.open(message)
        try:
            frame = decode_frame(frame_bytes)
            return decode_envelope(frame.payload), frame.flags
        except RemoteProtocolError:
            return None, 0
