"""The initiator's side of `Noise_IK_25519_ChaChaPoly_SHA256`, written out (Noise rev 34).

The bridge opens every session as IK's initiator, so its half of the handshake is here as the
Noise specification states it, over the stdlib's one-shot HMAC-SHA256 and `cryptography`'s
X25519 and ChaCha20-Poly1305, without noiseprotocol's general state machine (whose Python
around the same primitives was most of a handshake's cost). The box's side stays on
noiseprotocol (`noise.Responder`, the stub box), so every test that pairs the two checks one
implementation against the other; `contract/webapp-vectors.json` and the cacophony vectors pin
the bytes (`tests/proto/test_vectors.py`). Sections cited are the specification's:

- 5.2 SymmetricState: `h` starts as the 32-byte protocol name, `ck = h`; MixHash(data) sets
  `h = SHA256(h || data)`; MixKey(ikm) sets `ck, k = HKDF(ck, ikm)` and the nonce to 0;
  EncryptAndHash / DecryptAndHash use AD = `h`, then MixHash the ciphertext;
- 4.3 HKDF with two outputs: `temp = HMAC(ck, ikm)`, `o1 = HMAC(temp, 0x01)`,
  `o2 = HMAC(temp, o1 || 0x02)`;
- 5.1 / 12.3 ChaChaPoly nonces: 4 zero bytes then the 64-bit counter little-endian;
- 7.5 IK: pre-message `<- s`; message 1 `-> e, es, s, ss`; message 2 `<- e, ee, se`;
  Split gives the initiator's send key first.

Pure: no I/O, no clock. Raises `ValueError` (an all-zero DH result: a low-order key) and
`cryptography.exceptions.InvalidTag` (a bad MAC); `noise.Initiator` turns both into its own
errors.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable
from typing import Final

from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305

PROTOCOL_NAME: Final = b"Noise_IK_25519_ChaChaPoly_SHA256"
"""Exactly 32 bytes (the hash's length), so it is `h`'s first value as it is (section 5.2)."""
DH_BYTES: Final = 32
TAG_BYTES: Final = 16


def _hkdf2(ck: bytes, ikm: bytes) -> tuple[bytes, bytes]:
    temp = hmac.digest(ck, ikm, "sha256")
    first = hmac.digest(temp, b"\x01", "sha256")
    return first, hmac.digest(temp, first + b"\x02", "sha256")


def _nonce(n: int) -> bytes:
    return b"\x00\x00\x00\x00" + n.to_bytes(8, "little")


class IKInitiator:
    """One IK handshake as initiator: `message1(payload)`, then `message2(bytes)`.

    Args:
        prologue: the bytes both sides mix in first (`noise.session_prologue`).
        s: our static private key; `s_public` its 32-byte public key.
        rs: the responder's static public key; `rs_public` its 32 bytes.
        ss: DH(s, rs), given by the caller (it may be kept from an earlier handshake with
            the same pair of keys: the same value each time).
        e: our ephemeral private key; None makes a new one (a fixed one is for vectors only).
    """

    __slots__ = ("_ck", "_e", "_h", "_k", "_n", "_rs", "_s", "_s_public", "_ss")

    def __init__(
        self,
        prologue: bytes,
        s: X25519PrivateKey,
        s_public: bytes,
        rs: X25519PublicKey,
        rs_public: bytes,
        ss: Callable[[], bytes],
        e: X25519PrivateKey | None = None,
    ) -> None:
        h = hashlib.sha256(PROTOCOL_NAME + prologue).digest()
        self._h = hashlib.sha256(h + rs_public).digest()  # the pre-message `<- s`
        self._ck = PROTOCOL_NAME
        self._k = b""
        self._n = 0
        self._s, self._s_public, self._rs, self._ss = s, s_public, rs, ss
        self._e = e if e is not None else X25519PrivateKey.generate()

    def _mix_key(self, ikm: bytes) -> None:
        self._ck, self._k = _hkdf2(self._ck, ikm)
        self._n = 0

    def _encrypt_and_hash(self, plaintext: bytes) -> bytes:
        sealed = ChaCha20Poly1305(self._k).encrypt(_nonce(self._n), plaintext, self._h)
        self._n += 1
        self._h = hashlib.sha256(self._h + sealed).digest()
        return sealed

    def _decrypt_and_hash(self, sealed: bytes) -> bytes:
        plaintext = ChaCha20Poly1305(self._k).decrypt(_nonce(self._n), sealed, self._h)
        self._n += 1
        self._h = hashlib.sha256(self._h + sealed).digest()
        return plaintext

    def message1(self, payload: bytes = b"") -> bytes:
        """`-> e, es, s, ss` and the payload: 32 + 48 + len(payload) + 16 bytes."""
        e_public = self._e.public_key().public_bytes_raw()
        self._h = hashlib.sha256(self._h + e_public).digest()
        self._mix_key(self._e.exchange(self._rs))  # es
        s_sealed = self._encrypt_and_hash(self._s_public)
        self._mix_key(self._ss())  # ss
        return e_public + s_sealed + self._encrypt_and_hash(payload)

    def message2(self, message: bytes) -> tuple[bytes, bytes, bytes, bytes]:
        """`<- e, ee, se` and the payload: returns (send key, receive key, handshake hash,
        payload). `message` is at least 48 bytes (the caller checks)."""
        re_public, sealed = message[:DH_BYTES], message[DH_BYTES:]
        self._h = hashlib.sha256(self._h + re_public).digest()
        re = X25519PublicKey.from_public_bytes(re_public)
        self._mix_key(self._e.exchange(re))  # ee
        self._mix_key(self._s.exchange(re))  # se
        payload = self._decrypt_and_hash(sealed)
        send, recv = _hkdf2(self._ck, b"")
        return send, recv, self._h, payload
