"""The door's messages (PROTOCOL.md part C): uplink authentication and their CBOR shapes.

Every WebSocket message on `/v1/box` is one binary CBOR envelope (part A's `{t, id?, b?}`,
neither framed nor encrypted), at most 64 KiB. The bridge sends `door.challenge {nonce, nowMs}`;
the box answers `door.hello {home, build, sig}` with `sig` = Ed25519 over `"ftw.door.v1" 0x00 ||
nonce || home`, then `roster {roster}`. Tunnels carry one Noise message each: `tun {sid, d}`;
`tun.end {sid, reason}` ends one either way.
"""

from __future__ import annotations

from typing import Any, Final

from nacl.exceptions import BadSignatureError, CryptoError
from nacl.signing import SigningKey, VerifyKey

from .envelope import Envelope, decode_envelope
from .errors import LocalProtocolError, RemoteProtocolError
from .names import TunEndReason
from .registry import DOOR_CONTEXT, Msg

MAX_MESSAGE_BYTES: Final = 64 * 1024
NONCE_BYTES: Final = 16
CLOSE_BAD_MESSAGE: Final = 4400
CLOSE_BAD_SIGNATURE: Final = 4401
CLOSE_UNKNOWN_HOME: Final = 4403
CLOSE_SUPERSEDED: Final = 4409


def door_signature(home_key: SigningKey, nonce: bytes, home: str) -> bytes:
    """The box's answer to a challenge: Ed25519 over context || nonce || home (64 bytes)."""
    return bytes(home_key.sign(DOOR_CONTEXT + nonce + home.encode("utf-8")).signature)


def verify_door_signature(home_public: bytes, nonce: bytes, home: str, sig: bytes) -> bool:
    """Whether `sig` is the home's answer to `nonce` (part C)."""
    try:
        VerifyKey(home_public).verify(DOOR_CONTEXT + nonce + home.encode("utf-8"), sig)
    except (BadSignatureError, CryptoError, ValueError, TypeError):
        return False
    return True


def decode_door_message(data: bytes | str) -> Envelope:
    """Decode one door WebSocket message.

    Raises:
        RemoteProtocolError: a text message, over 64 KiB, or not an envelope.
    """
    if not isinstance(data, bytes):
        raise RemoteProtocolError("door messages are binary")
    if len(data) > MAX_MESSAGE_BYTES:
        raise RemoteProtocolError("door message over 64 KiB")
    if data.startswith(_TUN_HEAD):
        fast = _tun_in_place(data)
        if fast is not None:
            return fast
    return decode_envelope(data)


_TUN_HEAD: Final = b"\xa2\x61t\x63tun\x61b\xa2\x63sid"
"""The bytes every `tun {sid, d}` written as `tun()` writes it starts with (CBOR, RFC 8949)."""
_D_KEY: Final = b"\x61d"
_ARG_BYTES: Final = {24: 1, 25: 2, 26: 4, 27: 8}


def _tun_in_place(data: bytes) -> Envelope | None:
    """The `tun` message of `_TUN_HEAD`, an unsigned `sid`, the key `d` and a byte string that
    ends the message, read in place: the envelope `decode_envelope` gives for the same bytes,
    found without its scan and decoder (nearly every message a box sends). None for any other
    shape (a definite byte string's head of up to 4 length bytes only), which then goes the
    general way with all its checks."""
    pos = len(_TUN_HEAD)
    end = len(data)
    head = data[pos] if pos < end else 0xFF
    if head < 24:
        sid, pos = head, pos + 1
    elif head <= 27:
        width = _ARG_BYTES[head]
        sid, pos = int.from_bytes(data[pos + 1 : pos + 1 + width], "big"), pos + 1 + width
    else:
        return None
    if data[pos : pos + 2] != _D_KEY or pos + 2 >= end:
        return None
    head = data[pos + 2]
    pos += 3
    if 0x40 <= head < 0x58:
        size = head - 0x40
    elif 0x58 <= head <= 0x5A:
        width = 1 << (head - 0x58)
        size, pos = int.from_bytes(data[pos : pos + width], "big"), pos + width
    else:
        return None
    if pos + size != end:
        return None
    return Envelope("tun", None, {"sid": sid, "d": data[pos:]})


def tun_fields(body: Any) -> tuple[int, bytes]:
    """(sid, d) of a `tun` body.

    Raises:
        RemoteProtocolError: missing or mistyped fields.
    """
    if not isinstance(body, dict):
        raise RemoteProtocolError("tun body is not a map")
    sid, d = body.get("sid"), body.get("d")
    if isinstance(sid, bool) or not isinstance(sid, int) or sid < 0 or not isinstance(d, bytes):
        raise RemoteProtocolError("tun needs an unsigned sid and bytes d")
    return sid, d


def tun(sid: int, d: bytes) -> bytes:
    """A `tun {sid, d}` message: `_TUN_HEAD`, `sid` and `d` written in place, the bytes the
    envelope's CBOR encoder writes (shortest heads, RFC 8949 section 4.2.1; `sid` below 2^64,
    `d` below 4 GiB, as every tunnel's are).

    Raises:
        LocalProtocolError: a `sid` that is not an int (a bool, which the encoder writes as
            CBOR true or false, included), a negative one, or one of 2^64 or more.
    """
    if isinstance(sid, bool) or not isinstance(sid, int):
        raise LocalProtocolError(f"a tunnel's sid is an unsigned int, not {type(sid).__name__}")
    if not 0 <= sid < 2**64:
        raise LocalProtocolError("a tunnel's sid is a u64")
    return _TUN_HEAD + _head(0x00, sid) + _D_KEY + _head(0x40, len(d)) + d


def _head(major: int, arg: int) -> bytes:
    """A CBOR head of major type `major` (its top 3 bits) with `arg` in the fewest bytes."""
    if arg < 24:
        return bytes((major | arg,))
    width = 1 if arg < 0x100 else 2 if arg < 0x10000 else 4 if arg < 2**32 else 8
    return bytes((major | (24 + width.bit_length() - 1),)) + arg.to_bytes(width, "big")


def tun_end(sid: int, reason: TunEndReason) -> bytes:
    """A `tun.end {sid, reason}` message; `reason` is one of agents.yaml `tun_end_reasons`.

    Raises:
        LocalProtocolError: a reason the contract does not list.
    """
    if not isinstance(reason, TunEndReason):
        raise LocalProtocolError(f"{reason!r} is not a tun.end reason")
    return Envelope(Msg.TUN_END, None, {"sid": sid, "reason": reason.value}).encode()
