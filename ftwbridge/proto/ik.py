"""The initiator's side of `Noise_IK_25519_ChaChaPoly_SHA256`, written out (Noise rev 34).

The bridge opens every session as IK's initiator, so its half of the handshake is here as the
Noise specification states it, over the stdlib's HMAC-SHA256 (`hmac`), `cryptography`'s
ChaCha20-Poly1305 and libsodium's X25519 (PyNaCl's `crypto_scalarmult`), without
noiseprotocol's general state machine (whose Python around the same primitives was most of a
handshake's cost). libsodium's X25519 takes and gives raw 32-byte strings (no key objects to
build or parse) and, under callgrind, costs 0.23 M instructions for a new key's public half
and 0.37 M for an exchange against `cryptography`'s 0.47 M and 0.51 M (its OpenSSL build),
which makes it the cheaper of the two libraries the bridge already has. The box's side stays on
noiseprotocol (`noise.Responder`, the stub box, over `cryptography`), so every test that pairs
the two checks one implementation against the other; `contract/webapp-vectors.json` and the
cacophony vectors pin the bytes (`tests/proto/test_vectors.py`). Sections cited are the
specification's:

- 5.2 SymmetricState: `h` starts as the 32-byte protocol name, `ck = h`; MixHash(data) sets
  `h = SHA256(h || data)`; MixKey(ikm) sets `ck, k = HKDF(ck, ikm)` and the nonce to 0;
  EncryptAndHash / DecryptAndHash use AD = `h`, then MixHash the ciphertext;
- 4.3 HKDF with two outputs: `temp = HMAC(ck, ikm)`, `o1 = HMAC(temp, 0x01)`,
  `o2 = HMAC(temp, o1 || 0x02)`; message 2's `ee` MixKey sets `k` and its nonce that the `se`
  MixKey right after sets again, unused, so there only `o1` (the new `ck`) is computed;
- 5.1 / 12.3 ChaChaPoly nonces: 4 zero bytes then the 64-bit counter little-endian;
- 7.5 IK: pre-message `<- s`; message 1 `-> e, es, s, ss`; message 2 `<- e, ee, se`;
  Split gives the initiator's send key first.

Pure: no I/O, no clock. Every key is 32 bytes (the caller checks: libsodium reads 32 bytes
from each pointer whatever the string's length). Raises `nacl.exceptions.RuntimeError` (an
all-zero DH result: a low-order key, which libsodium refuses) and
`cryptography.exceptions.InvalidTag` (a bad MAC); `noise.Initiator` turns both into its own
errors.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
from collections.abc import Callable
from typing import Final

from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from nacl.bindings import crypto_scalarmult, crypto_scalarmult_base
from nacl.utils import random as random_bytes

PROTOCOL_NAME: Final = b"Noise_IK_25519_ChaChaPoly_SHA256"
"""Exactly 32 bytes (the hash's length), so it is `h`'s first value as it is (section 5.2)."""
DH_BYTES: Final = 32
INITIAL_H_CACHED: Final = 4096
"""Boxes whose handshake's first `h` is kept (`_initial_h`): one per home an open reaches."""
TAG_BYTES: Final = 16


def _hkdf2(ck: bytes, ikm: bytes) -> tuple[bytes, bytes]:
    # `temp` keys both outputs: keyed once, copied for the first (cheaper than keying twice)
    keyed = hmac.new(hmac.digest(ck, ikm, "sha256"), digestmod="sha256")
    one = keyed.copy()
    one.update(b"\x01")
    first = one.digest()
    keyed.update(first + b"\x02")
    return first, keyed.digest()


def _hkdf1(ck: bytes, ikm: bytes) -> bytes:
    """HKDF's first output alone (section 4.3): for a MixKey whose `k` the next MixKey
    replaces before any use."""
    return hmac.digest(hmac.digest(ck, ikm, "sha256"), b"\x01", "sha256")


@functools.lru_cache(maxsize=INITIAL_H_CACHED)
def _initial_h(prologue: bytes, rs: bytes) -> bytes:
    """`h` after the prologue and the pre-message `<- s` (section 5.2, 7.5): a function of
    the prologue and the responder's key only, so kept for each box's key."""
    h = hashlib.sha256(PROTOCOL_NAME + prologue).digest()
    return hashlib.sha256(h + rs).digest()


def _nonce(n: int) -> bytes:
    return b"\x00\x00\x00\x00" + n.to_bytes(8, "little")


class IKInitiator:
    """One IK handshake as initiator: `message1(payload)`, then `message2(bytes)`.

    Args:
        prologue: the bytes both sides mix in first (`noise.session_prologue`).
        s: our static private key (32 bytes); `s_public` its 32-byte public key.
        rs: the responder's static public key (32 bytes).
        ss: DH(s, rs), given by the caller (it may be kept from an earlier handshake with
            the same pair of keys: the same value each time).
        e: our ephemeral private key (32 bytes); None makes a new one from the OS's
            randomness (a fixed one is for vectors only).
    """

    __slots__ = ("_ck", "_e", "_h", "_k", "_n", "_rs", "_s", "_s_public", "_ss")

    def __init__(
        self,
        prologue: bytes,
        s: bytes,
        s_public: bytes,
        rs: bytes,
        ss: Callable[[], bytes],
        e: bytes | None = None,
    ) -> None:
        self._h = _initial_h(prologue, rs)
        self._ck = PROTOCOL_NAME
        self._k = b""
        self._n = 0
        self._s, self._s_public, self._ss = s, s_public, ss
        self._e = e if e is not None else random_bytes(DH_BYTES)
        self._rs = rs

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
        e_public = crypto_scalarmult_base(self._e)
        self._h = hashlib.sha256(self._h + e_public).digest()
        self._mix_key(crypto_scalarmult(self._e, self._rs))  # es
        s_sealed = self._encrypt_and_hash(self._s_public)
        self._mix_key(self._ss())  # ss
        return e_public + s_sealed + self._encrypt_and_hash(payload)

    def message2(self, message: bytes) -> tuple[bytes, bytes, bytes, bytes]:
        """`<- e, ee, se` and the payload: returns (send key, receive key, handshake hash,
        payload). `message` is at least 48 bytes (the caller checks)."""
        re, sealed = message[:DH_BYTES], message[DH_BYTES:]
        self._h = hashlib.sha256(self._h + re).digest()
        # ee: its `k` is replaced by se's before any encryption, so only `ck` is computed
        self._ck = _hkdf1(self._ck, crypto_scalarmult(self._e, re))
        self._mix_key(crypto_scalarmult(self._s, re))  # se
        payload = self._decrypt_and_hash(sealed)
        send, recv = _hkdf2(self._ck, b"")
        return send, recv, self._h, payload
