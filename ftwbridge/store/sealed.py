"""Agents' sealed private keys in the store, on SQLite and on PostgreSQL.

Only keys services use these rows, and only as sealed bytes: sealing and opening, under the
key-encryption key, happen in `ftwbridge.keys.sealed`. The table is `agent_keys` (SQLite's
schema in `sqlite.py`, PostgreSQL's in `migrations/0005_agent_keys.sql`).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, Protocol

from .base import BridgeStore
from .sql import SqlStore


@dataclass(frozen=True, slots=True)
class SealedKey:
    """One agent's row: its X25519 public key (32 bytes), home, sealed private key, and
    whether a roster of the home has listed it."""

    public: bytes
    home: str
    sealed: bytes
    listed: bool


class SealedKeyStore(Protocol):
    """The sealed agent keys, whatever database keeps them.

    Raises (every method):
        StoreError: PostgreSQL does not answer (`PgStore.thread`).
    """

    async def put_sealed_key(self, public: bytes, home: str, sealed: bytes) -> None:
        """Keep a new agent's sealed key, not yet listed."""

    async def sealed_key(self, public: bytes) -> SealedKey | None:
        """The row of `public`, or None."""

    async def any_sealed_key(self) -> SealedKey | None:
        """Some row, or None when there is none (to check a KEK at start)."""

    async def sync_sealed_keys(self, home: str, listed: Collection[bytes]) -> list[bytes]:
        """In one transaction: mark `home`'s keys in `listed` as listed, and delete its keys
        listed before and not in `listed`; returns the public keys deleted."""

    async def drop_sealed_key(self, public: bytes) -> bool:
        """Delete `public`'s row if no roster ever listed it; whether one went."""


class SqlSealedKeys:
    """`SealedKeyStore` on the store's own database, SQLite or PostgreSQL (`SqlStore.call`);
    `sync_sealed_keys` is the dialect's (`Dialect.sync_keys`)."""

    def __init__(self, store: SqlStore) -> None:
        self._store = store
        self._sql = store.dialect.sql

    async def put_sealed_key(self, public: bytes, home: str, sealed: bytes) -> None:
        """See `SealedKeyStore.put_sealed_key`."""
        sql = self._sql("INSERT INTO agent_keys VALUES (?, ?, ?, FALSE)")
        await self._store.call(
            lambda db: db.execute(sql, (public, home, sealed)),
            idempotent=False,  # a second try after a commit would meet its own row
        )

    async def sealed_key(self, public: bytes) -> SealedKey | None:
        """See `SealedKeyStore.sealed_key`."""
        sql = self._sql(f"{_SELECT} WHERE public_key = ?")
        return _row(await self._store.call(lambda db: db.execute(sql, (public,)).fetchone()))

    async def any_sealed_key(self) -> SealedKey | None:
        """See `SealedKeyStore.any_sealed_key`."""
        return _row(await self._store.call(lambda db: db.execute(f"{_SELECT} LIMIT 1").fetchone()))

    async def sync_sealed_keys(self, home: str, listed: Collection[bytes]) -> list[bytes]:
        """See `SealedKeyStore.sync_sealed_keys`."""
        wanted = [bytes(k) for k in listed]
        sync = self._store.dialect.sync_keys
        return await self._store.call(lambda db: sync(db, home, wanted), idempotent=False)

    async def drop_sealed_key(self, public: bytes) -> bool:
        """See `SealedKeyStore.drop_sealed_key`."""
        sql = self._sql("DELETE FROM agent_keys WHERE public_key = ? AND NOT listed")
        return bool(await self._store.call(lambda db: db.execute(sql, (public,)).rowcount))


_SELECT = "SELECT public_key, home, sealed, listed FROM agent_keys"


def _row(row: Any) -> SealedKey | None:
    if row is None:
        return None
    public, home, sealed, listed = row
    return SealedKey(bytes(public), str(home), bytes(sealed), bool(listed))


def sealed_keys(store: BridgeStore) -> SealedKeyStore:
    """The sealed-key rows of `store` (SQLite or PostgreSQL).

    Raises:
        TypeError: another kind of store, which keeps no sealed keys.
    """
    if not isinstance(store, SqlStore):
        raise TypeError(f"{type(store).__name__} keeps no sealed agent keys")
    return SqlSealedKeys(store)
