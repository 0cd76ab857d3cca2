"""Agents' sealed private keys in the store (issue 13 item 5), on SQLite and on PostgreSQL.

Only keys services use these rows, and only as sealed bytes: sealing and opening, under the
key-encryption key, happen in `ftwbridge.keys.sealed`. The table is `agent_keys` (SQLite's
schema in `sqlite.py`, PostgreSQL's in `migrations/0005_agent_keys.sql`).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from .base import BridgeStore
from .sqlite import SqliteStore

if TYPE_CHECKING:
    from .postgres import PgStore


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


class SqliteSealedKeys:
    """`SealedKeyStore` on the SQLite store's connection."""

    def __init__(self, store: SqliteStore) -> None:
        self._store = store

    async def put_sealed_key(self, public: bytes, home: str, sealed: bytes) -> None:
        """See `SealedKeyStore.put_sealed_key`."""
        await self._store.run(
            lambda db: db.execute(
                "INSERT INTO agent_keys VALUES (?, ?, ?, 0)", (public, home, sealed)
            )
        )

    async def sealed_key(self, public: bytes) -> SealedKey | None:
        """See `SealedKeyStore.sealed_key`."""
        sql = "SELECT public_key, home, sealed, listed FROM agent_keys WHERE public_key = ?"
        return _row(await self._store.run(lambda db: db.execute(sql, (public,)).fetchone()))

    async def any_sealed_key(self) -> SealedKey | None:
        """See `SealedKeyStore.any_sealed_key`."""
        sql = "SELECT public_key, home, sealed, listed FROM agent_keys LIMIT 1"
        return _row(await self._store.run(lambda db: db.execute(sql).fetchone()))

    async def sync_sealed_keys(self, home: str, listed: Collection[bytes]) -> list[bytes]:
        """See `SealedKeyStore.sync_sealed_keys`."""
        wanted = {bytes(k) for k in listed}

        def work(db: sqlite3.Connection) -> list[bytes]:
            with db:
                db.execute("BEGIN IMMEDIATE")
                rows = db.execute(
                    "SELECT public_key, listed FROM agent_keys WHERE home = ?", (home,)
                ).fetchall()
                gone = [bytes(k) for k, was in rows if was and bytes(k) not in wanted]
                marks = [(bytes(k),) for k, was in rows if not was and bytes(k) in wanted]
                db.executemany("UPDATE agent_keys SET listed = 1 WHERE public_key = ?", marks)
                db.executemany("DELETE FROM agent_keys WHERE public_key = ?", [(k,) for k in gone])
            return gone

        return await self._store.run(work)

    async def drop_sealed_key(self, public: bytes) -> bool:
        """See `SealedKeyStore.drop_sealed_key`."""
        sql = "DELETE FROM agent_keys WHERE public_key = ? AND listed = 0"
        return bool(await self._store.run(lambda db: db.execute(sql, (public,)).rowcount))


class PgSealedKeys:
    """`SealedKeyStore` on the PostgreSQL store's pool (`PgStore.query`)."""

    def __init__(self, store: PgStore) -> None:
        self._store = store

    async def put_sealed_key(self, public: bytes, home: str, sealed: bytes) -> None:
        """See `SealedKeyStore.put_sealed_key`."""
        await self._store.query(
            lambda db: db.execute(
                "INSERT INTO agent_keys VALUES (%s, %s, %s, FALSE)", (public, home, sealed)
            ),
            idempotent=False,  # a second try after a commit would meet its own row
        )

    async def sealed_key(self, public: bytes) -> SealedKey | None:
        """See `SealedKeyStore.sealed_key`."""
        sql = "SELECT public_key, home, sealed, listed FROM agent_keys WHERE public_key = %s"
        return _row(await self._store.query(lambda db: db.execute(sql, (public,)).fetchone()))

    async def any_sealed_key(self) -> SealedKey | None:
        """See `SealedKeyStore.any_sealed_key`."""
        sql = "SELECT public_key, home, sealed, listed FROM agent_keys LIMIT 1"
        return _row(await self._store.query(lambda db: db.execute(sql).fetchone()))

    async def sync_sealed_keys(self, home: str, listed: Collection[bytes]) -> list[bytes]:
        """See `SealedKeyStore.sync_sealed_keys`."""
        wanted = [bytes(k) for k in listed]

        def work(db: Any) -> list[bytes]:
            with db.transaction():
                db.execute(
                    "UPDATE agent_keys SET listed = TRUE"
                    " WHERE home = %s AND public_key = ANY(%s) AND NOT listed",
                    (home, wanted),
                )
                rows = db.execute(
                    "DELETE FROM agent_keys WHERE home = %s AND listed"
                    " AND NOT (public_key = ANY(%s)) RETURNING public_key",
                    (home, wanted),
                ).fetchall()
            return [bytes(row[0]) for row in rows]

        return list(await self._store.query(work, idempotent=False))

    async def drop_sealed_key(self, public: bytes) -> bool:
        """See `SealedKeyStore.drop_sealed_key`."""
        sql = "DELETE FROM agent_keys WHERE public_key = %s AND NOT listed"
        return bool(await self._store.query(lambda db: db.execute(sql, (public,)).rowcount))


def _row(row: Any) -> SealedKey | None:
    if row is None:
        return None
    public, home, sealed, listed = row
    return SealedKey(bytes(public), str(home), bytes(sealed), bool(listed))


def sealed_keys(store: BridgeStore) -> SealedKeyStore:
    """The sealed-key rows of `store` (SQLite or PostgreSQL)."""
    if isinstance(store, SqliteStore):
        return SqliteSealedKeys(store)
    from .postgres import PgStore  # psycopg loads only for a keys service that uses it

    assert isinstance(store, PgStore)
    return PgSealedKeys(store)
