"""The refresh grace window: repeats of one refresh token get one new pair, at any instance.

An editor that opens several tabs, or a client that retries after a lost response, sends the
same refresh token more than once within a moment, and behind a round-robin balancer those
repeats land on different instances. Strict rotation (OAuth 2.1 section 4.3.1) would treat the
second use as theft and revoke the whole grant, including the pair just issued. RFC 9700
section 4.14.2 allows the trade-off made here: every refresh of one token that arrives within
`grace_ms` of its first use receives the answer of that first use (the same access and refresh
token), and a use after the window still revokes the family. The price: whoever replays a
stolen refresh token within the window receives the same pair as its owner. The window closes
early once the new refresh token is used, since its owner then evidently holds the new pair.

The first use's answer is kept in the store (`ftwbridge.store.rotations`) sealed (pynacl's
SecretBox, XSalsa20-Poly1305) under a key derived from the used refresh token itself, so any
instance that is handed that token again can open it, and nothing the store holds can: the
store keeps tokens only as SHA-256, and the key is a different, keyed BLAKE2b of the token.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import trio
from nacl.exceptions import CryptoError
from nacl.secret import SecretBox

SEAL_PERSON = b"ftw-refresh-seal"
"""BLAKE2b's personalisation for the sealing key (16 bytes): this use of the token, no other."""
SEALED_FIELDS = ("access_token", "token_type", "scope", "refresh_token")
"""What a repeat is answered with from the sealed answer (`expires_in` is read again from the
access token's stored record, so it counts down)."""


def sealing_key(refresh_token: str) -> bytes:
    """The 32-byte SecretBox key for the answer to a use of `refresh_token` (its text)."""
    return hashlib.blake2b(
        refresh_token.encode("utf-8"), digest_size=32, person=SEAL_PERSON
    ).digest()


def seal_answer(refresh_token: str, answer: dict[str, Any]) -> bytes:
    """`answer`'s `SEALED_FIELDS` as JSON, sealed under `sealing_key(refresh_token)` (a fresh
    24-byte nonce first, then the ciphertext and its 16-byte tag)."""
    kept = {k: answer[k] for k in SEALED_FIELDS if k in answer}
    plain = json.dumps(kept, separators=(",", ":")).encode("utf-8")
    return bytes(SecretBox(sealing_key(refresh_token)).encrypt(plain))


def open_answer(refresh_token: str, sealed: bytes) -> dict[str, Any]:
    """The answer `seal_answer` sealed for `refresh_token`.

    Raises:
        ValueError: `sealed` was not sealed for this token, or was altered.
    """
    try:
        plain = SecretBox(sealing_key(refresh_token)).decrypt(sealed)
    except CryptoError:
        raise ValueError("the sealed answer does not open with this refresh token") from None
    answer = json.loads(plain)
    if not isinstance(answer, dict):
        raise ValueError("the sealed answer is not a JSON object")
    return answer


class Rotations:
    """The grace window's length, and this instance's refreshes under way.

    Args:
        grace_ms: the window, ms; 0 turns it off (every repeat revokes, strict rotation).
    """

    def __init__(self, grace_ms: int) -> None:
        self.grace_ms = grace_ms
        self._busy: dict[bytes, trio.Event] = {}

    def until_ms(self, now_ms: int) -> int:
        """The end of the window of a rotation made at `now_ms` (ms since the epoch)."""
        return now_ms + self.grace_ms

    @asynccontextmanager
    async def turn(self, digest: bytes) -> AsyncIterator[None]:
        """Refreshes of one token (by SHA-256 `digest`) at this instance take turns: a repeat
        waits for the first to finish and then reads its answer from the store, instead of
        minting a pair that the store would refuse. Instances do not wait for each other;
        the store's transaction decides between them (`RotationStore.rotate`)."""
        while (busy := self._busy.get(digest)) is not None:
            await busy.wait()
        done = self._busy[digest] = trio.Event()
        try:
            yield
        finally:
            del self._busy[digest]
            done.set()

    def __len__(self) -> int:
        """Refreshes under way at this instance."""
        return len(self._busy)
