"""The default store: one SQLite file, every query run off the trio thread (`trio.to_thread`).

The store's methods are `SqlStore`'s (`sql.py`); `SqliteDialect` says in SQLite what the
engines do not say alike, and `SqliteStore` keeps the connection. SQLite 3.24 or newer (the
upsert).
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, TypeVar

import trio

from .base import StoreError
from .dialect import Connection, Dialect, Found, Matcher
from .sql import SqlStore

T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS homes (home TEXT PRIMARY KEY, public_key BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS rosters (home TEXT PRIMARY KEY, seq INTEGER NOT NULL, signed BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS tokens (
    hash BLOB PRIMARY KEY, home TEXT NOT NULL, agent_id TEXT NOT NULL, agent_key BLOB NOT NULL,
    scopes TEXT NOT NULL, resource TEXT NOT NULL, client TEXT NOT NULL, expires_at_ms INTEGER NOT NULL,
    withdrawn INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS tokens_agent ON tokens (home, agent_key);
CREATE TABLE IF NOT EXISTS oauth_clients (client_id TEXT PRIMARY KEY, metadata TEXT NOT NULL, expires_at_ms INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS refresh_tokens (
    hash BLOB PRIMARY KEY, family TEXT NOT NULL, used INTEGER NOT NULL, record TEXT NOT NULL, expires_at_ms INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS refresh_family ON refresh_tokens (family);
CREATE TABLE IF NOT EXISTS oauth_state (
    kind TEXT NOT NULL, key TEXT NOT NULL, record TEXT NOT NULL, expires_at_ms INTEGER NOT NULL,
    PRIMARY KEY (kind, key)
);
CREATE TABLE IF NOT EXISTS agent_keys (
    public_key BLOB PRIMARY KEY, home TEXT NOT NULL, sealed BLOB NOT NULL, listed INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS agent_keys_home ON agent_keys (home);
CREATE TABLE IF NOT EXISTS refresh_rotations (
    parent BLOB PRIMARY KEY, child BLOB NOT NULL, sealed BLOB NOT NULL, until_ms INTEGER NOT NULL
);
"""


MIN_VERSION = (3, 24, 0)
"""The oldest SQLite whose SQL the store speaks (`INSERT ... ON CONFLICT DO UPDATE`)."""
BOUND = 500
"""Parameters per `IN (...)` list, below SQLite's bound on a statement's parameters."""


class SqliteDialect(Dialect):
    """`Dialect` of SQLite: `?` placeholders; JSON and lists of text kept as JSON text; a
    read-then-write made atomic by one `BEGIN IMMEDIATE` transaction (the write lock taken
    before the first read, against every other connection to the file, this process's or
    another's), the records matched in Python."""

    write_mark = "PRAGMA data_version"
    row_lock = ""
    error = sqlite3.Error

    def transaction(self, db: Connection) -> AbstractContextManager[object]:
        """See `Dialect.transaction`: `BEGIN IMMEDIATE`."""
        return _immediately(db)

    def sql(self, statement: str) -> str:
        """See `Dialect.sql`: SQLite's own."""
        return statement

    def json(self, value: Any) -> Any:
        """See `Dialect.json`: JSON text."""
        return json.dumps(value)

    def unjson(self, value: Any) -> Any:
        """See `Dialect.unjson`."""
        return json.loads(value)

    def texts(self, values: list[str]) -> Any:
        """See `Dialect.texts`: JSON text."""
        return json.dumps(values)

    def untexts(self, value: Any) -> tuple[str, ...]:
        """See `Dialect.untexts`."""
        return tuple(json.loads(value))

    def json_text(self, column: str, field: str) -> str:
        """See `Dialect.json_text` (`json_extract`; `->>` needs SQLite 3.38)."""
        return f"json_extract({column}, '$.{field}')"

    def among(self, values: list[str]) -> Iterator[tuple[str, tuple[Any, ...]]]:
        """See `Dialect.among`: `IN (...)` lists of at most `BOUND` values."""
        for i in range(0, len(values), BOUND):
            part = tuple(values[i : i + BOUND])
            yield f"IN ({','.join('?' * len(part))})", part

    def matching(self, where: dict[str, Any]) -> tuple[str, tuple[Any, ...], Matcher]:
        """See `Dialect.matching`: in Python (`matches`)."""
        return "", (), lambda record: matches(record, where)

    def use_refresh(
        self, db: Connection, token_hash: bytes, now_ms: int
    ) -> tuple[str, bool, dict[str, Any]] | None:
        """See `Dialect.use_refresh`: one write transaction, so another process on the file
        cannot read it unused between the read and the write."""
        with self.transaction(db):
            row = db.execute(
                "SELECT family, used, record FROM refresh_tokens"
                " WHERE hash = ? AND expires_at_ms > ?",
                (token_hash, now_ms),
            ).fetchone()
            if row is None:
                return None
            db.execute("UPDATE refresh_tokens SET used = 1 WHERE hash = ?", (token_hash,))
            return str(row[0]), bool(row[1]), dict(json.loads(row[2]))

    def change_state(
        self,
        db: Connection,
        kind: str,
        key: str,
        changes: dict[str, Any],
        now_ms: int,
        where: dict[str, Any] | None,
    ) -> dict[str, Any] | None:
        """See `Dialect.change_state`: read, compare and write in one immediate transaction."""
        with self.transaction(db):
            row = db.execute(
                "SELECT record FROM oauth_state WHERE kind = ? AND key = ? AND expires_at_ms > ?",
                (kind, key, now_ms),
            ).fetchone()
            record = None if row is None else dict(json.loads(row[0]))
            if record is None or not matches(record, where):
                return None
            record.update(changes)
            db.execute(
                "UPDATE oauth_state SET record = ? WHERE kind = ? AND key = ?",
                (json.dumps(record), kind, key),
            )
            return record

    def take_state(
        self, db: Connection, kind: str, key: str, now_ms: int, where: dict[str, Any] | None
    ) -> dict[str, Any] | None:
        """See `Dialect.take_state` (one immediate transaction)."""
        with self.transaction(db):
            row = db.execute(
                "SELECT record, expires_at_ms FROM oauth_state WHERE kind = ? AND key = ?",
                (kind, key),
            ).fetchone()
            record = None if row is None else dict(json.loads(row[0]))
            if record is None or not matches(record, where):
                return None
            db.execute("DELETE FROM oauth_state WHERE kind = ? AND key = ?", (kind, key))
            return record if int(row[1]) > now_ms else None

    def expire_states(self, db: Connection, kind: str, now_ms: int) -> Found:
        """See `Dialect.expire_states` (one immediate transaction)."""
        with self.transaction(db):
            rows = db.execute(
                "SELECT key, record, expires_at_ms FROM oauth_state"
                " WHERE kind = ? AND expires_at_ms <= ? ORDER BY key",
                (kind, now_ms),
            ).fetchall()
            db.execute(
                "DELETE FROM oauth_state WHERE kind = ? AND expires_at_ms <= ?", (kind, now_ms)
            )
            return [(str(k), dict(json.loads(r)), int(e)) for k, r, e in rows]

    def drop_states(self, db: Connection, kind: str, where: dict[str, Any]) -> int:
        """See `Dialect.drop_states` (one immediate transaction)."""
        with self.transaction(db):
            rows = db.execute(
                "SELECT key, record FROM oauth_state WHERE kind = ?", (kind,)
            ).fetchall()
            gone = [str(k) for k, r in rows if matches(dict(json.loads(r)), where)]
            for key in gone:
                db.execute("DELETE FROM oauth_state WHERE kind = ? AND key = ?", (kind, key))
            return len(gone)

    def sync_keys(self, db: Connection, home: str, wanted: list[bytes]) -> list[bytes]:
        """See `Dialect.sync_keys` (one immediate transaction)."""
        keep = set(wanted)

        with self.transaction(db):
            rows = db.execute(
                "SELECT public_key, listed FROM agent_keys WHERE home = ?", (home,)
            ).fetchall()
            gone = [bytes(k) for k, was in rows if was and bytes(k) not in keep]
            for k, was in rows:
                if not was and bytes(k) in keep:
                    db.execute("UPDATE agent_keys SET listed = 1 WHERE public_key = ?", (bytes(k),))
            for k in gone:
                db.execute("DELETE FROM agent_keys WHERE public_key = ?", (k,))
            return gone


SQLITE = SqliteDialect()
"""The one SQLite dialect (it keeps nothing)."""


class SqliteStore(SqlStore):
    """`Store` on SQLite. One connection, serialised by a lock, used from worker threads.

    Args:
        path: the database file (created with its folder), or ":memory:".

    Raises:
        StoreError: this SQLite is older than `MIN_VERSION`.
        sqlite3.DatabaseError: the file is damaged.
    """

    def __init__(self, path: Path | str) -> None:
        if sqlite3.sqlite_version_info < MIN_VERSION:
            raise StoreError(
                f"SQLite {sqlite3.sqlite_version} is older than 3.24, whose SQL the store needs"
            )
        super().__init__(SQLITE, f"the SQLite database {path}")
        if isinstance(path, Path):
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            if not path.exists():  # (touching one there fails on a read-only mount)
                path.touch(mode=0o600)  # tokens are hashed, but no one else reads it
        self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self._db.executescript(_SCHEMA)
        columns = {row[1] for row in self._db.execute("PRAGMA table_info(tokens)")}
        if "withdrawn" not in columns:  # a database from before tokens could be withdrawn
            self._db.execute("ALTER TABLE tokens ADD COLUMN withdrawn INTEGER NOT NULL DEFAULT 0")
        self._lock = threading.Lock()

    async def start(self) -> list[str]:
        """See `BridgeStore.start`: the schema was made at open; nothing to apply."""
        return []

    def close(self) -> None:
        """Close the database."""
        self._db.close()

    async def run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """`fn` on the connection in a worker thread, alone (for `store.sealed`)."""

        def work() -> T:
            with self._lock:
                return fn(self._db)

        return await trio.to_thread.run_sync(work)

    async def call(self, fn: Callable[[Connection], T], *, idempotent: bool = True) -> T:
        """See `SqlStore.call`: `run` (nothing is tried twice; a file does not break)."""
        return await self.run(fn)


@contextlib.contextmanager
def _immediately(db: Connection) -> Iterator[None]:
    """One `BEGIN IMMEDIATE` transaction (the write lock taken before the first read, so a
    read-then-write is atomic against every other connection), rolled back when it raises,
    unless SQLite already has: after SQLITE_FULL, SQLITE_IOERR, SQLITE_BUSY or SQLITE_NOMEM it
    may cancel the whole transaction itself (sqlite.org/lang_transaction.html, "Response To
    Errors Within A Transaction"; a full disk does), and a `ROLLBACK` then would hide the
    error behind "no transaction is active"."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        if getattr(db, "in_transaction", True):
            db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


def matches(record: dict[str, Any], where: dict[str, Any] | None) -> bool:
    """Whether `record` has every field of `where` with the same value and type (scalars: the
    JSON containment `record @> where` of PostgreSQL, where `false` is not `0`). A `str`
    subclass (a `StrEnum` member such as `ConsentStatus`) is a JSON string, as `json.dumps`
    writes it."""
    return where is None or all(
        k in record and type(record[k]) is _json_type(v) and record[k] == v
        for k, v in where.items()
    )


def _json_type(value: Any) -> type:
    """The type `value` has once written as JSON and read back: `str` for a `str` subclass."""
    return str if isinstance(value, str) else type(value)
