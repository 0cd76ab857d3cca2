"""Refresh-token rotations in the store, so any instance can answer a repeat (issue 13 item 1).

When a refresh token (the parent) is used, one transaction marks it used, keeps its new refresh
token (the child, by SHA-256) in its family, and keeps the rotation: the child's hash, the
answer sealed under a key that only the parent token itself yields (`ftwbridge.oauth.grace`),
and the end of the grace window. A repeat of the parent at any instance within the window reads
the rotation and opens the answer with the token it was given; nothing in the store opens it.

Tables: `refresh_tokens` (the store's own) and `refresh_rotations`: PostgreSQL's in
`migrations/0007_shared_limits.sql`, where a rotation goes with its parent row; SQLite's is made
here on first use (the bridge is one process there, but the rule is the same). Times are ms
since the epoch, by the bridge's wall clock.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from .sqlite import SqliteStore

if TYPE_CHECKING:
    from .postgres import PgStore

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
LEFT JOIN refresh_rotations g ON g.parent = r.hash AND g.until_ms > {now}
    AND EXISTS (SELECT 1 FROM refresh_tokens c WHERE c.hash = g.child AND NOT c.used)
WHERE r.hash = {parent} AND r.expires_at_ms > {now}
"""
"""A refresh token, and its rotation if the window is open and the child still unused (the
window closes early once the new refresh token is used: its owner holds the new pair)."""


_PURGE = "DELETE FROM refresh_rotations WHERE until_ms <= {now} OR child = {parent}"
"""Rotations whose window has ended, and the one whose child is being used now: a sealed pair
is kept no longer than a repeat may be answered from it."""


def _state(row: Any) -> RefreshState | None:
    if row is None:
        return None
    family, used, record, child, sealed, until = row
    graced = None if child is None else Graced(bytes(child), bytes(sealed), int(until))
    if isinstance(record, str):  # SQLite keeps JSON as text
        record = json.loads(record)
    return RefreshState(str(family), dict(record), bool(used), graced)


class SqliteRotations:
    """`RotationStore` on the SQLite store's connection (its lock makes each call alone)."""

    def __init__(self, store: SqliteStore) -> None:
        self._store = store
        self._made = False
        self._state_sql = _STATE.format(now=":now", parent=":parent")

    def _table(self, db: sqlite3.Connection) -> None:
        if not self._made:
            db.execute(
                "CREATE TABLE IF NOT EXISTS refresh_rotations (parent BLOB PRIMARY KEY,"
                " child BLOB NOT NULL, sealed BLOB NOT NULL, until_ms INTEGER NOT NULL)"
            )
            self._made = True

    async def refresh_state(self, parent: bytes, now_ms: int) -> RefreshState | None:
        """See `RotationStore.refresh_state`."""

        def work(db: sqlite3.Connection) -> RefreshState | None:
            self._table(db)
            args = {"parent": parent, "now": now_ms}
            return _state(db.execute(self._state_sql, args).fetchone())

        return await self._store.run(work)

    async def rotate(self, parent: bytes, now_ms: int, child: Child) -> RefreshState | None:
        """See `RotationStore.rotate`: one `BEGIN IMMEDIATE` transaction, so another process
        on the file cannot use the token between the read and the write."""

        def work(db: sqlite3.Connection) -> RefreshState | None:
            self._table(db)
            with db:
                db.execute("BEGIN IMMEDIATE")
                args = {"parent": parent, "now": now_ms}
                before = _state(db.execute(self._state_sql, args).fetchone())
                if before is None or before.used:
                    return before
                db.execute("UPDATE refresh_tokens SET used = 1 WHERE hash = ?", (parent,))
                db.execute(
                    "INSERT INTO refresh_tokens (hash, family, used, record, expires_at_ms)"
                    " VALUES (?, ?, 0, ?, ?)",
                    (child.hash, before.family, json.dumps(child.record), child.expires_at_ms),
                )
                db.execute(_PURGE.format(now="?", parent="?"), (now_ms, parent))
                if child.until_ms > now_ms:
                    db.execute(
                        "INSERT OR REPLACE INTO refresh_rotations VALUES (?, ?, ?, ?)",
                        (parent, child.hash, child.sealed, child.until_ms),
                    )
            return before

        return await self._store.run(work)


class PgRotations:
    """`RotationStore` on PostgreSQL (`PgStore.query`), shared by every instance."""

    def __init__(self, store: PgStore) -> None:
        self._store = store
        self._state_sql = _STATE.format(now="%(now)s", parent="%(parent)s")

    async def refresh_state(self, parent: bytes, now_ms: int) -> RefreshState | None:
        """See `RotationStore.refresh_state`: one statement."""
        args = {"parent": parent, "now": now_ms}
        return _state(
            await self._store.query(lambda db: db.execute(self._state_sql, args).fetchone())
        )

    async def rotate(self, parent: bytes, now_ms: int, child: Child) -> RefreshState | None:
        """See `RotationStore.rotate`: a transaction that first locks the parent's row
        (`FOR UPDATE`), so of two instances rotating one token at once the second waits for
        the first to commit, and then reads (a new snapshot per statement, PostgreSQL's READ
        COMMITTED) the token used and the first one's rotation."""
        import psycopg
        from psycopg.types.json import Jsonb

        from .postgres import first_line

        args = {"parent": parent, "now": now_ms}

        def work(db: Any) -> RefreshState | None:
            with db.transaction():
                db.execute("SELECT 1 FROM refresh_tokens WHERE hash = %s FOR UPDATE", (parent,))
                before = _state(db.execute(self._state_sql, args).fetchone())
                if before is None or before.used:
                    return before
                db.execute("UPDATE refresh_tokens SET used = TRUE WHERE hash = %s", (parent,))
                db.execute(
                    "INSERT INTO refresh_tokens (hash, family, used, record, expires_at_ms)"
                    " VALUES (%s, %s, FALSE, %s, %s)",
                    (child.hash, before.family, Jsonb(child.record), child.expires_at_ms),
                )
                if child.until_ms > now_ms:
                    db.execute(
                        "INSERT INTO refresh_rotations VALUES (%s, %s, %s, %s)",
                        (parent, child.hash, child.sealed, child.until_ms),
                    )
            try:  # after the commit, alone: a purge that fails leaves the rotation standing
                db.execute(_PURGE.format(now="%s", parent="%s"), (now_ms, parent))
            except psycopg.Error as exc:
                log.warning("ended refresh rotations were not deleted: %s", first_line(exc))
            return before

        # not tried twice: a rotation that committed before the connection broke would be
        # seen used by the second try, which would answer it as a repeat of itself
        return await self._store.query(work, idempotent=False)


_KEPT: weakref.WeakKeyDictionary[object, RotationStore] = weakref.WeakKeyDictionary()


def refresh_rotations(store: object) -> RotationStore:
    """The rotations of `store` (`SqliteStore` or `PgStore`), one object per store.

    Raises:
        TypeError: another kind of store, which keeps no refresh tokens of its own.
    """
    kept = _KEPT.get(store)
    if kept is None:
        if isinstance(store, SqliteStore):
            kept = SqliteRotations(store)
        else:
            from .postgres import PgStore  # psycopg loads only for a bridge that uses it

            if not isinstance(store, PgStore):
                raise TypeError(f"{type(store).__name__} keeps no refresh rotations")
            kept = PgRotations(store)
        _KEPT[store] = kept
    return kept
