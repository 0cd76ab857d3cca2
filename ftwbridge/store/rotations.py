"""Refresh-token rotations in the store, so any instance can answer a repeat.

When a refresh token (the parent) is used, one transaction marks it used, keeps its new refresh
token (the child, by SHA-256) in its family, and keeps the rotation: the child's hash, the
answer sealed under a key that only the parent token itself yields (`ftwbridge.oauth.grace`),
and the end of the grace window. A repeat of the parent at any instance within the window reads
the rotation and opens the answer with the token it was given; nothing in the store opens it.

Tables: `refresh_tokens` (the store's own) and `refresh_rotations`: PostgreSQL's in
`migrations/0007_shared_limits.sql`, where a rotation goes with its parent row; SQLite's in the
schema of `sqlite.py` (the bridge is one process there, but the rule is the same). One class
for both (`SqlRotations`), its statements written once; the engines differ only in their
transaction and whether a row lock is needed (`Dialect.transaction`, `Dialect.row_lock`).
Times are ms since the epoch, by the bridge's wall clock.
"""

from __future__ import annotations

import logging
import weakref
from dataclasses import dataclass
from typing import Any, Protocol

from .dialect import Connection, Dialect
from .sql import SqlStore, first_line, upsert

log = logging.getLogger("ftwbridge.store")


@dataclass(frozen=True, slots=True)
class Graced:
    """A rotation a repeat may still be answered from: the `child` refresh token's SHA-256
    (32 bytes), the `sealed` answer, and the window's end `until_ms`."""

    child: bytes
    sealed: bytes
    until_ms: int


@dataclass(frozen=True, slots=True)
class RefreshState:
    """A live refresh token as a rotation reads it: its `family`, `record` (home, agent key,
    scopes, client), whether it was `used`, and `graced`: its rotation while the window is
    open and its child has not been used (None otherwise, or when it was never rotated)."""

    family: str
    record: dict[str, Any]
    used: bool
    graced: Graced | None


@dataclass(frozen=True, slots=True)
class Child:
    """The new refresh token a rotation keeps: its SHA-256 (`hash`), `record`, `expires_at_ms`;
    and the rotation's `sealed` answer, kept until `until_ms` (not kept when that is not
    after the rotation's time: strict rotation)."""

    hash: bytes
    record: dict[str, Any]
    expires_at_ms: int
    sealed: bytes
    until_ms: int


class RotationStore(Protocol):
    """Refresh rotations, whatever database keeps them (RFC 9700 section 4.14.2).

    Raises (every method):
        StoreError: PostgreSQL does not answer (`PgStore.query`).
    """

    async def refresh_state(self, parent: bytes, now_ms: int) -> RefreshState | None:
        """The refresh token of SHA-256 `parent` at `now_ms`, or None when it is unknown,
        expired or revoked."""
        ...

    async def rotate(self, parent: bytes, now_ms: int, child: Child) -> RefreshState | None:
        """In one transaction: if `parent` is live and unused, mark it used, keep `child` in
        its family and keep the rotation. Returns `parent`'s state from before, so `used`
        False says this call rotated it, and True that another did first (its rotation is in
        `graced` while the window is open); None when it is unknown, expired or revoked."""
        ...


_STATE = """
SELECT r.family, r.used, r.record, g.child, g.sealed, g.until_ms
FROM refresh_tokens r
LEFT JOIN refresh_rotations g ON g.parent = r.hash AND g.until_ms > ?
    AND EXISTS (SELECT 1 FROM refresh_tokens c WHERE c.hash = g.child AND NOT c.used)
WHERE r.hash = ? AND r.expires_at_ms > ?
"""
"""A refresh token, and its rotation if the window is open and the child still unused (the
window closes early once the new refresh token is used: its owner holds the new pair).
Parameters: now, parent, now."""
_PURGE = "DELETE FROM refresh_rotations WHERE until_ms <= ? OR child = ?"
"""Rotations whose window has ended, and the one whose child is being used now: a sealed pair
is kept no longer than a repeat may be answered from it."""
_USED = "UPDATE refresh_tokens SET used = TRUE WHERE hash = ?"
_CHILD = (
    "INSERT INTO refresh_tokens (hash, family, used, record, expires_at_ms)"
    " VALUES (?, ?, FALSE, ?, ?)"
)
_ROTATION = upsert("refresh_rotations", ["parent"], ["child", "sealed", "until_ms"])


def _state(row: Any, dialect: Dialect) -> RefreshState | None:
    if row is None:
        return None
    family, used, record, child, sealed, until = row
    graced = None if child is None else Graced(bytes(child), bytes(sealed), int(until))
    return RefreshState(str(family), dict(dialect.unjson(record)), bool(used), graced)


class SqlRotations:
    """`RotationStore` on the store's own database, SQLite or PostgreSQL (`SqlStore.call`),
    shared by every instance on PostgreSQL."""

    def __init__(self, store: SqlStore) -> None:
        self._store = store
        self._d = store.dialect

    async def refresh_state(self, parent: bytes, now_ms: int) -> RefreshState | None:
        """See `RotationStore.refresh_state`: one statement."""
        sql, args = self._d.sql(_STATE), (now_ms, parent, now_ms)
        row = await self._store.call(lambda db: db.execute(sql, args).fetchone())
        return _state(row, self._d)

    async def rotate(self, parent: bytes, now_ms: int, child: Child) -> RefreshState | None:
        """See `RotationStore.rotate`: one transaction (SQLite: `BEGIN IMMEDIATE`, so another
        process on the file cannot use the token between the read and the write; PostgreSQL:
        the parent's row locked first, `FOR UPDATE`, so of two instances rotating one token
        at once the second waits for the first to commit, and then reads, a new snapshot per
        statement in READ COMMITTED, the token used and the first one's rotation). The ended
        rotations are purged after the commit, alone: a purge that fails leaves the rotation
        standing."""
        d = self._d

        def work(db: Connection) -> RefreshState | None:
            with d.transaction(db):
                if d.row_lock:
                    lock = f"SELECT 1 FROM refresh_tokens WHERE hash = ?{d.row_lock}"
                    db.execute(d.sql(lock), (parent,))
                before = _state(db.execute(d.sql(_STATE), (now_ms, parent, now_ms)).fetchone(), d)
                if before is None or before.used:
                    return before
                db.execute(d.sql(_USED), (parent,))
                record = d.json(child.record)
                db.execute(d.sql(_CHILD), (child.hash, before.family, record, child.expires_at_ms))
                if child.until_ms > now_ms:
                    rotation = (parent, child.hash, child.sealed, child.until_ms)
                    db.execute(d.sql(_ROTATION), rotation)
            try:
                db.execute(d.sql(_PURGE), (now_ms, parent))
            except d.error as exc:
                log.warning("ended refresh rotations were not deleted: %s", first_line(exc))
            return before

        # not tried twice: a rotation that committed before the connection broke would be
        # seen used by the second try, which would answer it as a repeat of itself
        return await self._store.call(work, idempotent=False)


_KEPT: weakref.WeakKeyDictionary[object, RotationStore] = weakref.WeakKeyDictionary()


def refresh_rotations(store: object) -> RotationStore:
    """The rotations of `store` (`SqliteStore` or `PgStore`), one object per store.

    Raises:
        TypeError: another kind of store, which keeps no refresh tokens of its own.
    """
    kept = _KEPT.get(store)
    if kept is None:
        if not isinstance(store, SqlStore):
            raise TypeError(f"{type(store).__name__} keeps no refresh rotations")
        kept = _KEPT[store] = SqlRotations(store)
    return kept
