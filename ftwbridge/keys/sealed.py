"""The keys part with agents' private keys sealed in the store, so that any keys service of a cluster can open any agent's session.

Each agent's X25519 private key is kept in the store's `agent_keys` table sealed with pynacl's
`SecretBox` (XSalsa20-Poly1305) under the key-encryption key (`kek`, 32 bytes), which only
keys services hold: the plaintext is the private key (32 bytes) followed by the home's name in
UTF-8, so a row moved to another home or given another agent's sealed bytes does not open as
valid. Nothing is cached: every `begin` reads the row, so several keys services on one database
serve the same agents, and a key one of them forgets is gone for all at once.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from typing import TypeVar

import nacl.exceptions
import nacl.secret
import trio
from nacl.public import PrivateKey

from ftwbridge.proto.noise import TransportKeys, generate_static
from ftwbridge.store.base import StoreError
from ftwbridge.store.sealed import SealedKey, SealedKeyStore

from .service import Handshakes, KeysError, UnknownAgentKey

log = logging.getLogger("ftwbridge.keys")
T = TypeVar("T")


def seal_key(box: nacl.secret.SecretBox, private: bytes, home: str) -> bytes:
    """An agent's X25519 `private` key (32 bytes) of `home`, sealed under the `kek` of `box`
    as a keys service keeps it (module docstring): 40 + 32 + len(home in UTF-8) bytes."""
    return bytes(box.encrypt(private + home.encode("utf-8")))


def open_sealed(box: nacl.secret.SecretBox, row: SealedKey) -> bytes:
    """The private key (32 bytes) sealed in `row`, checked against the row's home and public
    key.

    Raises:
        KeysError: it does not open under this `kek`, or it belongs to another row.
    """
    try:
        plain = box.decrypt(row.sealed)
    except nacl.exceptions.CryptoError:
        raise KeysError("an agent's sealed key does not open under this kek") from None
    private, home = plain[:32], plain[32:]
    if home != row.home.encode("utf-8") or bytes(PrivateKey(private).public_key) != row.public:
        raise KeysError("an agent's sealed key does not belong to its row")
    return private


class KekError(Exception):
    """The `kek` does not open the keys the store holds; one sentence for the operator."""


class SealedKeysService:
    """`KeysPort` on sealed keys in `store`, under `kek` (32 bytes).

    Raises (every method but the handshake's own):
        KeysError: the store does not answer (its sentence), or a sealed key does not open.
    """

    def __init__(self, store: SealedKeyStore, kek: bytes) -> None:
        self._store = store
        self._box = nacl.secret.SecretBox(kek)
        self._handshakes = Handshakes()

    async def check_kek(self) -> None:
        """Open one stored key, if any, so a keys service started with another `kek` than
        the one that sealed them says so at start rather than at each session.

        Raises:
            KekError: a stored key does not open under this `kek`.
            StoreError: the store does not answer.
        """
        row = await self._store.any_sealed_key()
        if row is not None:
            try:
                self._open(row)
            except KeysError:
                raise KekError(
                    "kek does not open the agent keys the database holds (they were sealed"
                    " under another kek); give every keys service the same kek"
                ) from None

    def _open(self, row: SealedKey) -> bytes:
        return open_sealed(self._box, row)

    @property
    def pending_handshakes(self) -> int:
        """Handshakes begun and neither finished nor aborted."""
        return len(self._handshakes)

    async def create(self, home: str) -> bytes:
        """See `KeysPort.create`: a new key, sealed and stored before its public key is
        given out."""
        private, public = generate_static()
        sealed = seal_key(self._box, private, home)
        await self._stored(self._store.put_sealed_key(public, home, sealed))
        return public

    async def begin(self, agent_key: bytes, box_noise_key: bytes) -> tuple[int, bytes]:
        """See `KeysPort.begin`.

        Raises:
            KeysError: unknown agent key, a sealed key that does not open, too many
                unfinished handshakes, or the store does not answer.
        """
        row = await self._stored(self._store.sealed_key(agent_key))
        if row is None:
            raise UnknownAgentKey("the keys part holds no such agent key")
        try:
            private = self._open(row)
        except KeysError as exc:
            log.error("agent key %s of home %s: %s", agent_key.hex()[:16], row.home, exc)
            raise
        return self._handshakes.begin(
            private, box_noise_key, now=trio.current_time(), home=row.home
        )

    async def finish(self, handle: int, message2: bytes) -> TransportKeys:
        """See `KeysPort.finish`."""
        return self._handshakes.finish(handle, message2)

    async def abort(self, handle: int) -> None:
        """See `KeysPort.abort`."""
        self._handshakes.abort(handle)

    async def sync(self, home: str, listed: frozenset[bytes]) -> list[bytes]:
        """See `KeysPort.sync` (one transaction in the store)."""
        return await self._stored(self._store.sync_sealed_keys(home, listed))

    async def has(self, agent_key: bytes) -> bool:
        """See `KeysPort.has`."""
        return await self._stored(self._store.sealed_key(agent_key)) is not None

    async def drop(self, agent_key: bytes) -> None:
        """See `KeysPort.drop`."""
        await self._stored(self._store.drop_sealed_key(agent_key))

    @staticmethod
    async def _stored(work: Awaitable[T]) -> T:
        try:
            return await work
        except StoreError as exc:
            raise KeysError(str(exc)) from None
