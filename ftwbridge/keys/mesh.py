"""The keys channel: bridge instances and keys services over TCP, authenticated with the mesh key.

Sans-I/O (no sockets, no clock): `MeshChannel` takes received bytes and returns events, and
queues the bytes to write (`data_to_send`), as h11 and h2 do. The TCP shells are
`keys/listen.py` (the keys service) and `keys/remote.py` (the bridge); docs/architecture.md,
"What runs where", says where each runs.

Every frame is `length (u32 big-endian) | type (1 byte) | body`, `length` counting the type
byte and the body, at most `MAX_FRAME_BYTES`. The handshake, the client proving first:

    client -> HELLO     version (1 byte) | client nonce (32 bytes)
    server -> CHALLENGE server nonce (32 bytes)
    client -> PROOF     HMAC-SHA256(channel key, "client" | client nonce | server nonce)
    server -> PROOF     HMAC-SHA256(channel key, "server" | client nonce | server nonce)

The channel key is HKDF-SHA256 (RFC 5869) of the mesh key with the info "ftwbridge keys
channel v1", so this channel's MACs never sign what the forwarding signatures sign with the same
mesh key. A server gives nothing keyed to a peer that has not proved the key first. Then every
frame is DATA: a CBOR value sealed with ChaCha20-Poly1305 (RFC 8439) under the sender's
direction key (HKDF of the channel key, salted with both nonces, one key per direction), the
nonce a counter of the sender's frames (4 zero bytes | u64 big-endian, from 0), the frame's 5
header bytes as associated data. A frame replayed, reordered, cut, or from another connection
fails to open. REFUSED carries one sentence (UTF-8, plain) and ends the channel; either side
sends it for any fault it finds, then closes.
"""

from __future__ import annotations

import enum
import hmac
import os
import string
from dataclasses import dataclass
from hashlib import sha256
from typing import Any, Final

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from ftwbridge.proto.envelope import dumps, loads
from ftwbridge.proto.errors import ProtocolError

VERSION: Final = 1
MESH_KEY_BYTES: Final = 32
NONCE_BYTES: Final = 32
MAX_FRAME_BYTES: Final = 64 * 1024
"""The largest frame (type byte and body), bytes; a keys request or answer needs under 1 KiB
(a roster's key list: 32 bytes a key, at most a few hundred keys)."""
MAX_SENTENCE_BYTES: Final = 300
"""The longest refusal sentence sent or shown, bytes."""
_HEADER: Final = 5
_TAG: Final = 16


class Frame(enum.IntEnum):
    """A frame's type byte."""

    HELLO = 1
    CHALLENGE = 2
    PROOF = 3
    DATA = 4
    REFUSED = 5


class State(enum.Enum):
    """Where a channel is: waiting for which handshake frame, open, or closed (after a refusal
    either way; nothing more is read or sent)."""

    AWAIT_HELLO = "await_hello"
    AWAIT_CHALLENGE = "await_challenge"
    AWAIT_PROOF = "await_proof"
    OPEN = "open"
    CLOSED = "closed"


WRONG_KEY: Final = "the peer did not prove the mesh key: its mesh_key differs from this one's"
"""What the side that finds a wrong proof says (and sends the peer)."""


@dataclass(frozen=True, slots=True)
class Established:
    """Both sides proved the mesh key; messages may flow."""


@dataclass(frozen=True, slots=True)
class Message:
    """One CBOR value the peer sent (authenticated and in order)."""

    value: Any


@dataclass(frozen=True, slots=True)
class Refused:
    """The channel ended: `ours` when this side found the fault (the same sentence went to the
    peer in a REFUSED frame), else the peer's sentence, cleaned to printable ASCII."""

    sentence: str
    ours: bool


ChannelEvent = Established | Message | Refused


class ChannelClosed(Exception):
    """`send_message` on a channel that is not open (a caller's mistake, never the peer's)."""


def _hkdf(key: bytes, *, salt: bytes | None, info: bytes) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=salt, info=info).derive(key)


def _clean(raw: bytes) -> str:
    text = raw[:MAX_SENTENCE_BYTES].decode("ascii", "replace")
    return "".join(c if c in string.printable and c not in "\r\n\t\x0b\x0c" else "?" for c in text)


class MeshChannel:
    """One end of a keys channel (module docstring).

    Args:
        mesh_key: the cluster's shared secret, 32 bytes.
        client: True for the bridge's end (it speaks first), False for the keys service's.
        nonce: this end's 32-byte nonce; None draws one from `os.urandom` (tests pin it).

    Raises:
        ValueError: a mesh key or nonce of the wrong length.
    """

    def __init__(self, mesh_key: bytes, *, client: bool, nonce: bytes | None = None) -> None:
        if len(mesh_key) != MESH_KEY_BYTES:
            raise ValueError(f"the mesh key must be {MESH_KEY_BYTES} bytes")
        self._nonce = os.urandom(NONCE_BYTES) if nonce is None else nonce
        if len(self._nonce) != NONCE_BYTES:
            raise ValueError(f"a nonce must be {NONCE_BYTES} bytes")
        self._key = _hkdf(mesh_key, salt=None, info=b"ftwbridge keys channel v1")
        self._client = client
        self._their_nonce = b""
        self._in = bytearray()
        self._out = bytearray()
        self._send: ChaCha20Poly1305 | None = None
        self._recv: ChaCha20Poly1305 | None = None
        self._sent = 0
        self._received = 0
        self.state = State.AWAIT_CHALLENGE if client else State.AWAIT_HELLO
        if client:
            self._frame(Frame.HELLO, bytes([VERSION]) + self._nonce)

    @property
    def is_open(self) -> bool:
        """Whether messages may be sent now."""
        return self.state is State.OPEN

    @property
    def is_closed(self) -> bool:
        """Whether the channel has ended (a refusal either way)."""
        return self.state is State.CLOSED

    def data_to_send(self) -> bytes:
        """The bytes this end wants written to the peer since the last call (may be empty)."""
        out = bytes(self._out)
        self._out.clear()
        return out

    def send_message(self, value: Any) -> None:
        """Seal one CBOR value for the peer (queued in `data_to_send`).

        Raises:
            ChannelClosed: the channel is not open.
            ValueError: the value cannot be encoded, or is larger than a frame.
        """
        if self._send is None or self.state is not State.OPEN:
            raise ChannelClosed("the keys channel is not open")
        plain = dumps(value)
        length = 1 + len(plain) + _TAG
        if length > MAX_FRAME_BYTES:
            raise ValueError(f"a keys message of {len(plain)} bytes is over the frame cap")
        header = length.to_bytes(4, "big") + bytes([Frame.DATA])
        sealed = self._send.encrypt(_counter(self._sent), plain, header)
        self._sent += 1
        self._out += header + sealed

    def refuse(self, sentence: str) -> Refused:
        """End the channel from this side, telling the peer `sentence` (a REFUSED frame)."""
        raw = sentence.encode("ascii", "replace")[:MAX_SENTENCE_BYTES]
        if self.state is not State.CLOSED:
            self._frame(Frame.REFUSED, raw)
        self.state = State.CLOSED
        self._in.clear()
        return Refused(_clean(raw), ours=True)

    def receive_data(self, data: bytes | bytearray) -> list[ChannelEvent]:
        """Take bytes from the peer; returns the events they complete, in order. Any fault
        (a frame over `MAX_FRAME_BYTES`, a type out of turn, a wrong proof, a frame that does
        not open, a value that is not CBOR) ends the channel with a `Refused` of ours, and a
        REFUSED frame to the peer in `data_to_send`. Nothing is read once closed."""
        if self.state is State.CLOSED:
            return []
        self._in += data
        events: list[ChannelEvent] = []
        while not self.is_closed and len(self._in) >= 4:
            length = int.from_bytes(self._in[:4], "big")
            if not 1 <= length <= MAX_FRAME_BYTES:
                events.append(self.refuse(f"a frame of {length} bytes is outside 1 to 65536"))
                break
            if len(self._in) < 4 + length:
                break
            header = bytes(self._in[:_HEADER])
            body = bytes(self._in[_HEADER : 4 + length])
            del self._in[: 4 + length]
            events.extend(self._on_frame(header, body))
        return events

    def _frame(self, kind: Frame, body: bytes) -> None:
        self._out += (1 + len(body)).to_bytes(4, "big") + bytes([kind]) + body

    def _proof(self, role: bytes) -> bytes:
        client_nonce, server_nonce = (
            (self._nonce, self._their_nonce) if self._client else (self._their_nonce, self._nonce)
        )
        return hmac.new(self._key, role + client_nonce + server_nonce, sha256).digest()

    def _open_keys(self) -> None:
        client_nonce, server_nonce = (
            (self._nonce, self._their_nonce) if self._client else (self._their_nonce, self._nonce)
        )
        salt = client_nonce + server_nonce
        c2s = ChaCha20Poly1305(_hkdf(self._key, salt=salt, info=b"client to server"))
        s2c = ChaCha20Poly1305(_hkdf(self._key, salt=salt, info=b"server to client"))
        self._send, self._recv = (c2s, s2c) if self._client else (s2c, c2s)
        self.state = State.OPEN

    def _on_frame(self, header: bytes, body: bytes) -> list[ChannelEvent]:
        kind, state = header[4], self.state
        if kind == Frame.REFUSED:
            self.state = State.CLOSED
            self._in.clear()
            return [Refused(_clean(body), ours=False)]
        if state is State.AWAIT_HELLO and kind == Frame.HELLO:
            if len(body) != 1 + NONCE_BYTES or body[0] != VERSION:
                return [self.refuse(f"not a keys channel hello of version {VERSION}")]
            self._their_nonce = body[1:]
            self._frame(Frame.CHALLENGE, self._nonce)
            self.state = State.AWAIT_PROOF
            return []
        if state is State.AWAIT_CHALLENGE and kind == Frame.CHALLENGE:
            if len(body) != NONCE_BYTES:
                return [self.refuse("a challenge must hold a 32-byte nonce")]
            self._their_nonce = body
            self._frame(Frame.PROOF, self._proof(b"client"))
            self.state = State.AWAIT_PROOF
            return []
        if state is State.AWAIT_PROOF and kind == Frame.PROOF:
            theirs = b"server" if self._client else b"client"
            if not hmac.compare_digest(body, self._proof(theirs)):
                return [self.refuse(WRONG_KEY)]
            if not self._client:
                self._frame(Frame.PROOF, self._proof(b"server"))
            self._open_keys()
            return [Established()]
        if state is State.OPEN and kind == Frame.DATA and self._recv is not None:
            try:
                plain = self._recv.decrypt(_counter(self._received), body, header)
            except InvalidTag:
                return [self.refuse("a frame did not open (forged, replayed or out of order)")]
            self._received += 1
            try:
                return [Message(loads(plain))]
            except ProtocolError:
                return [self.refuse("a message is not the CBOR a keys request is")]
        return [self.refuse(f"a frame of type {kind} is out of turn ({state.value})")]


def _counter(n: int) -> bytes:
    return bytes(4) + n.to_bytes(8, "big")
