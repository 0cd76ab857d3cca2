"""The default store: one SQLite file, every query run off the trio thread (`trio.to_thread`)."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any, TypeVar

import trio

from .base import TokenRecord

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
"""


def hash_token(token: str) -> bytes:
    """SHA-256 of a token's text (32 bytes): the only form in which tokens are stored."""
    return hashlib.sha256(token.encode("utf-8")).digest()


class SqliteStore:
    """`Store` on SQLite. One connection, serialised by a lock, used from worker threads.

    Args:
        path: the database file (created with its folder), or ":memory:".
    """

    def __init__(self, path: Path | str) -> None:
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
        return await self._run(fn)

    async def _run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        def work() -> T:
            with self._lock:
                return fn(self._db)

        return await trio.to_thread.run_sync(work)

    async def _exec(self, sql: str, args: tuple[Any, ...]) -> int:
        return await self._run(lambda db: db.execute(sql, args).rowcount)

    async def _one(self, sql: str, args: tuple[Any, ...]) -> Any:
        return await self._run(lambda db: db.execute(sql, args).fetchone())

    async def enroll_home(self, home: str, public_key: bytes) -> None:
        """See `Store.enroll_home`."""
        await self._exec("INSERT OR REPLACE INTO homes VALUES (?, ?)", (home, public_key))

    async def home_key(self, home: str) -> bytes | None:
        """See `Store.home_key`."""
        row = await self._one("SELECT public_key FROM homes WHERE home = ?", (home,))
        return None if row is None else bytes(row[0])

    async def home_keys(self, homes: Collection[str]) -> dict[str, bytes]:
        """See `Store.home_keys`."""
        wanted = list(homes)

        def work(db: sqlite3.Connection) -> dict[str, bytes]:
            out: dict[str, bytes] = {}
            for i in range(0, len(wanted), 500):  # below SQLite's bound on parameters
                part = wanted[i : i + 500]
                marks = ",".join("?" * len(part))
                sql = f"SELECT home, public_key FROM homes WHERE home IN ({marks})"
                for home, key in db.execute(sql, part):
                    out[str(home)] = bytes(key)
            return out

        return await self._run(work)

    async def write_mark(self) -> int:
        """See `Store.write_mark`: SQLite's `PRAGMA data_version`, which changes on this
        connection when another connection has committed (sqlite.org/pragma.html#pragma_data_version)."""
        row = await self._one("PRAGMA data_version", ())
        return int(row[0])

    async def put_roster(self, home: str, seq: int, signed: bytes) -> None:
        """See `Store.put_roster`."""
        await self._exec("INSERT OR REPLACE INTO rosters VALUES (?, ?, ?)", (home, seq, signed))

    async def roster(self, home: str) -> tuple[int, bytes] | None:
        """See `Store.roster`."""
        row = await self._one("SELECT seq, signed FROM rosters WHERE home = ?", (home,))
        return None if row is None else (int(row[0]), bytes(row[1]))

    async def put_token(self, token_hash: bytes, record: TokenRecord) -> None:
        """See `Store.put_token`."""
        r = record
        await self._exec(
            "INSERT OR REPLACE INTO tokens VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                token_hash,
                r.home,
                r.agent_id,
                r.agent_key,
                json.dumps(list(r.scopes)),
                r.resource,
                r.client,
                r.expires_at_ms,
                int(r.withdrawn),
            ),
        )

    async def token(self, token_hash: bytes) -> TokenRecord | None:
        """See `Store.token`."""
        row = await self._one(
            "SELECT home, agent_id, agent_key, scopes, resource, client, expires_at_ms, withdrawn"
            " FROM tokens WHERE hash = ?",
            (token_hash,),
        )
        if row is None:
            return None
        home, agent_id, key, scopes, resource, client, exp, withdrawn = row
        return TokenRecord(
            home,
            agent_id,
            bytes(key),
            tuple(json.loads(scopes)),
            resource,
            client,
            exp,
            bool(withdrawn),
        )

    async def put_client(
        self, client_id: str, metadata: dict[str, Any], expires_at_ms: int
    ) -> None:
        """Keep a registered OAuth client (RFC 7591) until `expires_at_ms`."""
        await self._exec(
            "INSERT OR REPLACE INTO oauth_clients VALUES (?, ?, ?)",
            (client_id, json.dumps(metadata), expires_at_ms),
        )

    async def client(self, client_id: str, now_ms: int) -> dict[str, Any] | None:
        """A registered client's metadata, or None when unknown or expired."""
        row = await self._one(
            "SELECT metadata FROM oauth_clients WHERE client_id = ? AND expires_at_ms > ?",
            (client_id, now_ms),
        )
        return None if row is None else dict(json.loads(row[0]))

    async def purge_clients(self, now_ms: int) -> None:
        """Delete expired client registrations."""
        await self._exec("DELETE FROM oauth_clients WHERE expires_at_ms <= ?", (now_ms,))

    async def refresh_record(self, token_hash: bytes, now_ms: int) -> dict[str, Any] | None:
        """A live refresh token's record, without using it."""
        row = await self._one(
            "SELECT record FROM refresh_tokens WHERE hash = ? AND expires_at_ms > ?",
            (token_hash, now_ms),
        )
        return None if row is None else dict(json.loads(row[0]))

    async def put_refresh(
        self, token_hash: bytes, family: str, record: dict[str, Any], expires_at_ms: int
    ) -> None:
        """Keep a refresh token's hash in its rotation family."""
        await self._exec(
            "INSERT INTO refresh_tokens VALUES (?, ?, 0, ?, ?)",
            (token_hash, family, json.dumps(record), expires_at_ms),
        )

    async def use_refresh(
        self, token_hash: bytes, now_ms: int
    ) -> tuple[str, bool, dict[str, Any]] | None:
        """See `BridgeStore.use_refresh` (atomic across processes on the file, too)."""

        def work(db: sqlite3.Connection) -> tuple[str, bool, dict[str, Any]] | None:
            # one write transaction: another process on the file cannot read it unused between
            with db:
                db.execute("BEGIN IMMEDIATE")
                row = db.execute(
                    "SELECT family, used, record FROM refresh_tokens WHERE hash = ? AND expires_at_ms > ?",
                    (token_hash, now_ms),
                ).fetchone()
                if row is None:
                    return None
                db.execute("UPDATE refresh_tokens SET used = 1 WHERE hash = ?", (token_hash,))
            return str(row[0]), bool(row[1]), dict(json.loads(row[2]))

        return await self._run(work)

    async def drop_family(self, family: str) -> None:
        """Revoke a whole refresh-token family."""
        await self._exec("DELETE FROM refresh_tokens WHERE family = ?", (family,))

    async def drop_token(self, token_hash: bytes) -> int:
        """Delete one access token by its hash; returns how many rows went."""
        return await self._exec("DELETE FROM tokens WHERE hash = ?", (token_hash,))

    async def drop_refresh_of_agent(self, home: str, agent_key: bytes) -> None:
        """Revoke every refresh token of one agent at one home."""
        await self._exec(
            "DELETE FROM refresh_tokens WHERE json_extract(record, '$.home') = ? AND json_extract(record, '$.agentKey') = ?",
            (home, agent_key.hex()),
        )

    async def withdraw_agent_tokens(self, home: str, agent_key: bytes) -> int:
        """See `Store.withdraw_agent_tokens`."""
        return await self._exec(
            "UPDATE tokens SET withdrawn = 1 WHERE home = ? AND agent_key = ?", (home, agent_key)
        )

    async def drop_agent_tokens(self, home: str, agent_key: bytes) -> int:
        """See `Store.drop_agent_tokens`."""
        return await self._exec(
            "DELETE FROM tokens WHERE home = ? AND agent_key = ?", (home, agent_key)
        )

    async def put_oauth_state(
        self, kind: str, key: str, record: dict[str, Any], expires_at_ms: int
    ) -> None:
        """See `OAuthStore.put_oauth_state` (ftwbridge/oauth/model.py)."""
        await self._exec(
            "INSERT OR REPLACE INTO oauth_state VALUES (?, ?, ?, ?)",
            (kind, key, json.dumps(record), expires_at_ms),
        )

    async def drop_oauth_state(self, kind: str, key: str) -> None:
        """See `OAuthStore.drop_oauth_state`."""
        await self._exec("DELETE FROM oauth_state WHERE kind = ? AND key = ?", (kind, key))

    async def oauth_states(self, kind: str, now_ms: int) -> list[tuple[str, dict[str, Any], int]]:
        """See `OAuthStore.oauth_states`."""

        def work(db: sqlite3.Connection) -> list[tuple[str, dict[str, Any], int]]:
            db.execute(
                "DELETE FROM oauth_state WHERE kind = ? AND expires_at_ms <= ?", (kind, now_ms)
            )
            rows = db.execute(
                "SELECT key, record, expires_at_ms FROM oauth_state WHERE kind = ? ORDER BY key",
                (kind,),
            ).fetchall()
            return [(str(k), dict(json.loads(r)), int(e)) for k, r, e in rows]

        return await self._run(work)

    async def oauth_state(
        self, kind: str, key: str, now_ms: int
    ) -> tuple[dict[str, Any], int] | None:
        """See `OAuthStore.oauth_state`."""
        row = await self._one(
            "SELECT record, expires_at_ms FROM oauth_state"
            " WHERE kind = ? AND key = ? AND expires_at_ms > ?",
            (kind, key, now_ms),
        )
        return None if row is None else (dict(json.loads(row[0])), int(row[1]))

    async def change_oauth_state(
        self,
        kind: str,
        key: str,
        changes: dict[str, Any],
        now_ms: int,
        *,
        where: dict[str, Any] | None = None,
    ) -> dict[str, Any] | None:
        """See `OAuthStore.change_oauth_state`: read, compare and write in one immediate
        transaction, so no other writer (of this process or another) comes between."""

        @_immediate
        def work(db: sqlite3.Connection) -> dict[str, Any] | None:
            row = db.execute(
                "SELECT record FROM oauth_state WHERE kind = ? AND key = ? AND expires_at_ms > ?",
                (kind, key, now_ms),
            ).fetchone()
            record = None if row is None else dict(json.loads(row[0]))
            if record is None or not _matches(record, where):
                return None
            record.update(changes)
            db.execute(
                "UPDATE oauth_state SET record = ? WHERE kind = ? AND key = ?",
                (json.dumps(record), kind, key),
            )
            return record

        return await self._run(work)

    async def take_oauth_state(
        self, kind: str, key: str, now_ms: int, *, where: dict[str, Any] | None = None
    ) -> dict[str, Any] | None:
        """See `OAuthStore.take_oauth_state` (one immediate transaction)."""

        @_immediate
        def work(db: sqlite3.Connection) -> dict[str, Any] | None:
            row = db.execute(
                "SELECT record, expires_at_ms FROM oauth_state WHERE kind = ? AND key = ?",
                (kind, key),
            ).fetchone()
            record = None if row is None else dict(json.loads(row[0]))
            if record is None or not _matches(record, where):
                return None
            db.execute("DELETE FROM oauth_state WHERE kind = ? AND key = ?", (kind, key))
            return record if int(row[1]) > now_ms else None

        return await self._run(work)

    async def find_oauth_states(
        self, kind: str, now_ms: int, where: dict[str, Any]
    ) -> list[tuple[str, dict[str, Any], int]]:
        """See `OAuthStore.find_oauth_states` (the records are matched here, in Python)."""

        def work(db: sqlite3.Connection) -> list[tuple[str, dict[str, Any], int]]:
            rows = db.execute(
                "SELECT key, record, expires_at_ms FROM oauth_state"
                " WHERE kind = ? AND expires_at_ms > ? ORDER BY key",
                (kind, now_ms),
            ).fetchall()
            found = [(str(k), dict(json.loads(r)), int(e)) for k, r, e in rows]
            return [item for item in found if _matches(item[1], where)]

        return await self._run(work)

    async def expire_oauth_states(
        self, kind: str, now_ms: int
    ) -> list[tuple[str, dict[str, Any], int]]:
        """See `OAuthStore.expire_oauth_states` (one immediate transaction)."""

        @_immediate
        def work(db: sqlite3.Connection) -> list[tuple[str, dict[str, Any], int]]:
            rows = db.execute(
                "SELECT key, record, expires_at_ms FROM oauth_state"
                " WHERE kind = ? AND expires_at_ms <= ? ORDER BY key",
                (kind, now_ms),
            ).fetchall()
            db.execute(
                "DELETE FROM oauth_state WHERE kind = ? AND expires_at_ms <= ?", (kind, now_ms)
            )
            return [(str(k), dict(json.loads(r)), int(e)) for k, r, e in rows]

        return await self._run(work)

    async def drop_oauth_states(self, kind: str, where: dict[str, Any]) -> int:
        """See `OAuthStore.drop_oauth_states` (one immediate transaction)."""

        @_immediate
        def work(db: sqlite3.Connection) -> int:
            rows = db.execute(
                "SELECT key, record FROM oauth_state WHERE kind = ?", (kind,)
            ).fetchall()
            gone = [str(k) for k, r in rows if _matches(dict(json.loads(r)), where)]
            for key in gone:
                db.execute("DELETE FROM oauth_state WHERE kind = ? AND key = ?", (kind, key))
            return len(gone)

        return await self._run(work)

    async def count_oauth_states(self, kind: str, now_ms: int) -> int:
        """See `OAuthStore.count_oauth_states`."""
        row = await self._one(
            "SELECT COUNT(*) FROM oauth_state WHERE kind = ? AND expires_at_ms > ?", (kind, now_ms)
        )
        return int(row[0])


def _immediate(fn: Callable[[sqlite3.Connection], T]) -> Callable[[sqlite3.Connection], T]:
    """`fn` run in one `BEGIN IMMEDIATE` transaction (the write lock taken before the first
    read, so a read-then-write is atomic against every other connection), rolled back when
    it raises."""

    def run(db: sqlite3.Connection) -> T:
        db.execute("BEGIN IMMEDIATE")
        try:
            out = fn(db)
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")
        return out

    return run


def _matches(record: dict[str, Any], where: dict[str, Any] | None) -> bool:
    """Whether `record` has every field of `where` with the same value and type (scalars: the
    JSON containment `record @> where` of PostgreSQL, where `false` is not `0`)."""
    return where is None or all(
        k in record and type(record[k]) is type(v) and record[k] == v for k, v in where.items()
    )
