"""Noise IK handshakes and the explicit-`seq` transport (PROTOCOL.md part A).

`Initiator` runs the bridge's side of `Noise_IK_25519_ChaChaPoly_SHA256` (`ik.py`, the
specification written out); `Responder`, the box's side, wraps noiseprotocol's
`NoiseConnection`; `Transport` seals and opens transport messages with
`cryptography`'s ChaCha20-Poly1305: wire = `seq` (8 bytes big-endian) || AEAD(frame), nonce = 4
zero bytes || `seq` little-endian, associated data = the 8 `seq` bytes. The receiver keeps a
64-wide replay window that only authenticated messages move; `seq` 2^64-1 is never used.
noiseprotocol's exceptions (which share no base class) and `cryptography`'s `InvalidTag` are
caught here and only here.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from typing import Any, Final

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from nacl.bindings import crypto_scalarmult, crypto_scalarmult_base
from noise.connection import Keypair, NoiseConnection

from .errors import LocalProtocolError, RemoteProtocolError
from .ik import IKInitiator
from .registry import SESSION_PROLOGUE

PROTOCOL_NAME: Final = b"Noise_IK_25519_ChaChaPoly_SHA256"
KEY_BYTES: Final = 32
MESSAGE1_MIN_BYTES: Final = 96
MESSAGE2_BYTES: Final = 48
SEQ_BYTES: Final = 8
TAG_BYTES: Final = 16
REPLAY_WINDOW: Final = 64
MAX_SEQ: Final = 2**64 - 2
"""The last `seq` a sender may use: 2^64-1 is never used (PROTOCOL.md part A)."""


def session_prologue(box_noise_key: bytes) -> bytes:
    """`ftw.session.v1:` followed by the box's 32-byte static public key (47 bytes)."""
    if len(box_noise_key) != KEY_BYTES:
        raise LocalProtocolError("box Noise key must be 32 bytes")
    return SESSION_PROLOGUE + box_noise_key


def generate_static() -> tuple[bytes, bytes]:
    """A new X25519 key pair as (private 32 bytes, public 32 bytes), from the OS's randomness."""
    private = os.urandom(KEY_BYTES)
    return private, public_key(private)


def public_key(private: bytes) -> bytes:
    """The X25519 public key (32 bytes) of a 32-byte private key."""
    key = X25519PrivateKey.from_private_bytes(private)
    return key.public_key().public_bytes_raw()


class StaticKey:
    """A Noise static X25519 private key (32 bytes) with its public half derived once, for a
    party that begins many handshakes with the same key (the keys part, once per agent).

    Deriving the public half is a scalar multiplication as dear as a DH (about 25 us); a
    handshake given a `StaticKey` skips it. So is IK's `ss` token, DH(our static, their
    static), the same for every handshake with the same box: the last box's result is kept
    here, next to the private key it comes from, and used again while that box's key stays the
    same. A handshake never changes the key, so one `StaticKey` serves any number of them, one
    after another or at once.

    Raises:
        LocalProtocolError: `private` is not 32 bytes.
    """

    __slots__ = ("_ss", "private", "public")

    def __init__(self, private: bytes) -> None:
        if len(private) != KEY_BYTES:
            raise LocalProtocolError("static key must be 32 bytes")
        self.private: Final = bytes(private)
        """The private key, 32 bytes."""
        self.public: Final = crypto_scalarmult_base(self.private)
        """The public key, 32 bytes."""
        self._ss: tuple[bytes, bytes] | None = None
        """(the box's public key, DH(ours, it)): the last box's `ss` result."""

    def ss(self, box: bytes) -> bytes:
        """DH(this key, `box`'s 32-byte public key), kept for the last box.

        Raises:
            nacl.exceptions.RuntimeError: an all-zero result (a low-order key).
        """
        kept = self._ss
        if kept is None or kept[0] != box:
            kept = self._ss = (box, crypto_scalarmult(self.private, box))
        return kept[1]


# noiseprotocol raises its own classes (no common base), ValueError from `cryptography` (and
# `nacl.exceptions.RuntimeError` from libsodium, `ik.py`) on an all-zero DH result, and
# InvalidTag on a failed MAC: everything either side can throw on peer input.
_NOISE_ERRORS: Final = (Exception,)


def _noise_error(exc: BaseException) -> RemoteProtocolError:
    return RemoteProtocolError(f"Noise handshake refused: {type(exc).__name__}")


@dataclass(frozen=True, slots=True)
class TransportKeys:
    """What a finished handshake yields: send key, receive key (32 bytes each) and the
    handshake hash (32 bytes), which is the session id."""

    send_key: bytes
    recv_key: bytes
    handshake_hash: bytes


class _Handshake:
    def __init__(
        self,
        *,
        initiator: bool,
        our_static: bytes,
        prologue: bytes,
        our_ephemeral: bytes | None = None,
    ) -> None:
        if len(our_static) != KEY_BYTES:
            raise LocalProtocolError("static key must be 32 bytes")
        conn = NoiseConnection.from_name(PROTOCOL_NAME)
        if initiator:
            conn.set_as_initiator()
        else:
            conn.set_as_responder()
        conn.set_prologue(prologue)
        conn.set_keypair_from_private_bytes(Keypair.STATIC, our_static)
        if our_ephemeral is None:
            conn.start_handshake()
        else:  # a fixed ephemeral key: test vectors only; noiseprotocol warns about it
            conn.set_keypair_from_private_bytes(Keypair.EPHEMERAL, our_ephemeral)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                conn.start_handshake()
        self._conn: Any = conn
        self._failed = False

    def _guard(self) -> None:
        if self._failed:
            raise LocalProtocolError("this handshake already failed")

    def _keys(self) -> TransportKeys:
        proto = self._conn.noise_protocol
        enc, dec = proto.cipher_state_encrypt.k, proto.cipher_state_decrypt.k
        return TransportKeys(bytes(enc), bytes(dec), bytes(self._conn.get_handshake_hash()))


class Initiator:
    """The agent side of IK: `write_message1()` -> bytes, then `read_message2(bytes)` -> keys
    (the handshake itself is `ik.IKInitiator`).

    Args:
        our_static: the agent's X25519 private key (32 bytes, or parsed once: `StaticKey`).
        their_static: the box's Noise static public key from the roster (32 bytes).
        prologue: `session_prologue(their_static)` in production; the vectors use `ftw1`.
        our_ephemeral: a fixed ephemeral private key, for test vectors only.

    Raises:
        LocalProtocolError: a key of the wrong length.
    """

    __slots__ = ("_failed", "_ik", "_written")

    def __init__(
        self,
        *,
        our_static: bytes | StaticKey,
        their_static: bytes,
        prologue: bytes | None = None,
        our_ephemeral: bytes | None = None,
    ) -> None:
        if not isinstance(our_static, StaticKey):
            our_static = StaticKey(our_static)
        if prologue is None:
            prologue = session_prologue(their_static)  # raises for a box key of another size
        if len(their_static) != KEY_BYTES:
            raise LocalProtocolError("remote static key must be 32 bytes")
        if our_ephemeral is not None and len(our_ephemeral) != KEY_BYTES:
            raise LocalProtocolError("ephemeral key must be 32 bytes")
        box = bytes(their_static)
        key = our_static
        self._ik = IKInitiator(
            prologue,
            key.private,
            key.public,
            box,
            lambda: key.ss(box),  # DH(our static, the box's), kept with our key for this box
            None if our_ephemeral is None else bytes(our_ephemeral),
        )
        self._failed = False
        self._written = False

    def _guard(self) -> None:
        if self._failed:
            raise LocalProtocolError("this handshake already failed")

    def write_message1(self, payload: bytes = b"") -> bytes:
        """Handshake message 1 (`e, es, s, ss`): 96 bytes plus the payload's 16-byte-tagged length.

        Raises:
            LocalProtocolError: called twice or after a failure.
        """
        self._guard()
        if self._written:
            self._failed = True
            raise LocalProtocolError("cannot write message 1: it was written already")
        self._written = True
        try:
            return self._ik.message1(payload)
        except _NOISE_ERRORS as exc:
            self._failed = True
            raise LocalProtocolError(f"cannot write message 1: {type(exc).__name__}") from exc

    def read_message2(self, message: bytes) -> tuple[TransportKeys, bytes]:
        """Read message 2 (`e, ee, se`), returning (transport keys, payload).

        Raises:
            RemoteProtocolError: too short, a bad MAC, an all-zero DH result, or read before
                message 1 or twice.
        """
        self._guard()
        if len(message) < MESSAGE2_BYTES or not self._written:
            self._failed = True
            raise RemoteProtocolError("handshake message 2 is too short, or out of turn")
        self._failed = True  # one message 2 per handshake, whatever it holds
        try:
            send, recv, handshake_hash, payload = self._ik.message2(bytes(message))
        except _NOISE_ERRORS as exc:
            raise _noise_error(exc) from exc
        return TransportKeys(send, recv, handshake_hash), payload


class Responder(_Handshake):
    """The box side of IK: `read_message1(bytes)` -> (initiator's static key, payload), then
    `write_message2()` -> (bytes, keys). Keys are returned from the responder's view: its send
    key is the initiator's receive key.

    Args:
        our_static: the box's Noise static private key (32 bytes).
        prologue: `session_prologue(our public key)` when None.
        our_ephemeral: a fixed ephemeral private key, for test vectors only.
    """

    def __init__(
        self,
        *,
        our_static: bytes,
        prologue: bytes | None = None,
        our_ephemeral: bytes | None = None,
    ) -> None:
        super().__init__(
            initiator=False,
            our_static=our_static,
            prologue=session_prologue(public_key(our_static)) if prologue is None else prologue,
            our_ephemeral=our_ephemeral,
        )

    def read_message1(self, message: bytes) -> tuple[bytes, bytes]:
        """Read message 1, returning (initiator's static public key, payload).

        Raises:
            RemoteProtocolError: too short, bad MAC, all-zero DH result, or any other failure.
        """
        self._guard()
        if len(message) < MESSAGE1_MIN_BYTES:
            self._failed = True
            raise RemoteProtocolError("handshake message 1 is too short")
        try:
            payload = bytes(self._conn.read_message(message))
            their = self._conn.noise_protocol.handshake_state.rs.public_bytes
        except _NOISE_ERRORS as exc:
            self._failed = True
            raise _noise_error(exc) from exc
        return bytes(their), payload

    def write_message2(self, payload: bytes = b"") -> tuple[bytes, TransportKeys]:
        """Write message 2 (48 bytes with an empty payload), returning (message, keys).

        Raises:
            LocalProtocolError: called out of order or after a failure.
        """
        self._guard()
        try:
            message = bytes(self._conn.write_message(payload))
        except _NOISE_ERRORS as exc:
            self._failed = True
            raise LocalProtocolError(f"cannot write message 2: {type(exc).__name__}") from exc
        return message, self._keys()


class Transport:
    """Seal and open transport messages for one session (PROTOCOL.md part A).

    `seal(frame)` -> wire bytes with the next `seq`; `open(wire)` -> frame bytes. Any failure to
    open poisons nothing: the message is refused and the window is left unmoved, as the
    contract says only frames that authenticate move it.
    """

    def __init__(self, keys: TransportKeys) -> None:
        self._send = ChaCha20Poly1305(keys.send_key)
        self._recv = ChaCha20Poly1305(keys.recv_key)
        self._next_seq = 0
        self._top = -1  # highest authenticated seq received
        self._seen = 0  # bit i set: seq (_top - i) was received

    def seal(self, frame: bytes) -> bytes:
        """Encrypt one frame into a transport message: 8-byte `seq`, ciphertext, 16-byte tag.

        Raises:
            LocalProtocolError: the `seq` space is spent (2^64-1 is never used).
        """
        seq = self._next_seq
        if seq > MAX_SEQ:
            raise LocalProtocolError("transport seq space is spent")
        self._next_seq = seq + 1
        head = seq.to_bytes(SEQ_BYTES, "big")
        nonce = b"\x00\x00\x00\x00" + seq.to_bytes(8, "little")
        return head + self._send.encrypt(nonce, frame, head)

    def open(self, message: bytes) -> bytes:
        """Authenticate and decrypt one transport message, returning the frame bytes.

        Raises:
            RemoteProtocolError: too short, `seq` 2^64-1, replayed or older than the window, or
                a failed tag.
        """
        if len(message) < SEQ_BYTES + TAG_BYTES:
            raise RemoteProtocolError("transport message too short")
        head = message[:SEQ_BYTES]
        seq = int.from_bytes(head, "big")
        if seq > MAX_SEQ:
            raise RemoteProtocolError("transport seq 2^64-1 is never used")
        if seq <= self._top:
            back = self._top - seq
            if back >= REPLAY_WINDOW or self._seen >> back & 1:
                raise RemoteProtocolError("transport message replayed or too old")
        nonce = b"\x00\x00\x00\x00" + seq.to_bytes(8, "little")
        try:
            frame = self._recv.decrypt(nonce, message[SEQ_BYTES:], head)
        except InvalidTag as exc:
            raise RemoteProtocolError("transport message failed authentication") from exc
        if seq > self._top:
            shift = seq - self._top
            self._seen = ((self._seen << shift) | 1) & ((1 << REPLAY_WINDOW) - 1)
            self._top = seq
        else:
            self._seen |= 1 << (self._top - seq)
        return frame
