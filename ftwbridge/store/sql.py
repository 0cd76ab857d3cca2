"""One SQL store over two engines: each store method declared once (`SqlStore`), each
statement written once where SQLite and PostgreSQL agree, and a small `Dialect` for what they
say differently.

Statements are written with `?` placeholders (DB-API "qmark"); a dialect turns them into its
own (`Dialect.sql`). Both engines take the same upsert (`INSERT ... ON CONFLICT (key) DO UPDATE
SET c = excluded.c`, SQLite 3.24 or newer) and `TRUE` and `FALSE`, so these are shared. A
dialect keeps the rest: how JSON and lists of text are stored and read, a JSON field as text,
membership in a set of values, where the write mark is read, transactions and row locks, and
the statements that read and write one thing atomically, which PostgreSQL says in one
statement (`RETURNING`, `FOR UPDATE`, JSONB containment `@>`) and SQLite in one `BEGIN
IMMEDIATE` transaction.

An engine's own class (`SqliteStore` in `sqlite.py`, `PgStore` in `postgres.py`) adds how a
statement reaches its database (`SqlStore.call`: one SQLite connection under a lock, or a
pooled PostgreSQL connection with its retry and `StoreError`) and its lifetime (`start`,
`close`). The dialect's interface is in `dialect.py`; docs/architecture.md, "One store, two
dialects", says why the cut is there.
"""

from __future__ import annotations

import abc
import logging
from collections.abc import Callable, Collection, Sequence
from typing import Any, TypeVar

from .base import StoreError, TokenRecord
from .dialect import Connection, Dialect, Found

T = TypeVar("T")
log = logging.getLogger("ftwbridge.store")


def first_line(exc: BaseException) -> str:
    """The first line of an error's text (libpq's messages run on with DETAIL and HINT)."""
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def upsert(table: str, keys: Sequence[str], columns: Sequence[str]) -> str:
    """The statement that inserts a row of `table` (`keys` then `columns`, in the table's own
    order) or, when one with the same `keys` is there, sets its `columns`."""
    marks = ", ".join("?" * (len(keys) + len(columns)))
    sets = ", ".join(f"{c} = excluded.{c}" for c in columns)
    return (
        f"INSERT INTO {table} VALUES ({marks}) ON CONFLICT ({', '.join(keys)}) DO UPDATE SET {sets}"
    )


_HOME = upsert("homes", ["home"], ["public_key"])
_ROSTER = upsert("rosters", ["home"], ["seq", "signed"])
_TOKEN = upsert(
    "tokens",
    ["hash"],
    ["home", "agent_id", "agent_key", "scopes", "resource", "client", "expires_at_ms", "withdrawn"],
)
_CLIENT = upsert("oauth_clients", ["client_id"], ["metadata", "expires_at_ms"])
_STATE = upsert("oauth_state", ["kind", "key"], ["record", "expires_at_ms"])


class SqlStore(abc.ABC):
    """`BridgeStore` on SQL: every method once, over the engine's `dialect`.

    Args:
        dialect: how the engine says what the engines do not say alike.
        where: the database as an operator may read it (never a password).

    Raises (every method):
        StoreError: the database does not answer (PostgreSQL; `PgStore.thread`).
    """

    def __init__(self, dialect: Dialect, where: str) -> None:
        self.dialect = dialect
        self.where = where
        self._mark: int | None = None
        """The last `write_mark` read, given again while the database does not answer."""
        self._outage = False
        """Whether the last `write_mark` found the database not answering."""

    @abc.abstractmethod
    async def call(self, fn: Callable[[Connection], T], *, idempotent: bool = True) -> T:
        """`fn` on a connection in a worker thread (the statements of `SqlStore`, and of the
        sealed keys and rotations that live in the same database), its statements in the
        engine's placeholders (`dialect.sql`); tried once more after a broken connection
        only when `idempotent` (and the engine can)."""

    @abc.abstractmethod
    async def start(self) -> list[str]:
        """See `BridgeStore.start`."""

    @abc.abstractmethod
    def close(self) -> None:
        """See `BridgeStore.close`."""

    async def _exec(self, sql: str, args: tuple[Any, ...], *, idempotent: bool = True) -> int:
        q = self.dialect.sql(sql)
        return await self.call(lambda db: db.execute(q, args).rowcount, idempotent=idempotent)

    async def _one(self, sql: str, args: tuple[Any, ...], *, idempotent: bool = True) -> Any:
        q = self.dialect.sql(sql)
        return await self.call(lambda db: db.execute(q, args).fetchone(), idempotent=idempotent)

    async def enroll_home(self, home: str, public_key: bytes) -> None:
        """See `Store.enroll_home`."""
        await self._exec(_HOME, (home, public_key))

    async def home_key(self, home: str) -> bytes | None:
        """See `Store.home_key`."""
        row = await self._one("SELECT public_key FROM homes WHERE home = ?", (home,))
        return None if row is None else bytes(row[0])

    async def home_keys(self, homes: Collection[str]) -> dict[str, bytes]:
        """See `Store.home_keys`."""
        d, wanted = self.dialect, list(homes)

        def work(db: Connection) -> dict[str, bytes]:
            out: dict[str, bytes] = {}
            for test, args in d.among(wanted):
                sql = d.sql(f"SELECT home, public_key FROM homes WHERE home {test}")
                for home, key in db.execute(sql, args):
                    out[str(home)] = bytes(key)
            return out

        return await self.call(work)

    async def write_mark(self) -> int:
        """See `Store.write_mark` (SQLite: `PRAGMA data_version`, which changes on this
        connection when another connection has committed, sqlite.org/pragma.html; PostgreSQL:
        a counter the `homes_written` trigger grows in the same transaction as any change to
        `homes`, migrations/0001_initial.sql).

        While the database does not answer, the last mark read is given again and a warning
        logged once: the door polls this every second, and an instance keeps serving the
        homes it holds through an outage (`/readyz` says the store does not answer); a change
        made meanwhile is noticed on the first poll that reaches the database.

        Raises:
            StoreError: the database has not answered once yet.
        """
        try:
            row = await self._one(self.dialect.write_mark, ())
        except StoreError as exc:
            if self._mark is None:
                raise
            if not self._outage:
                log.warning("%s; home keys are checked again when it answers", exc)
                self._outage = True
            return self._mark
        if self._outage:
            log.warning("%s answers again", self.where)
            self._outage = False
        self._mark = int(row[0])
        return self._mark

    async def put_roster(self, home: str, seq: int, signed: bytes) -> None:
        """See `Store.put_roster`."""
        await self._exec(_ROSTER, (home, seq, signed))

    async def roster(self, home: str) -> tuple[int, bytes] | None:
        """See `Store.roster`."""
        row = await self._one("SELECT seq, signed FROM rosters WHERE home = ?", (home,))
        return None if row is None else (int(row[0]), bytes(row[1]))

    async def put_token(self, token_hash: bytes, record: TokenRecord) -> None:
        """See `Store.put_token`."""
        r = record
        scopes = self.dialect.texts(list(r.scopes))
        args = (token_hash, r.home, r.agent_id, r.agent_key, scopes, r.resource, r.client)
        await self._exec(_TOKEN, (*args, r.expires_at_ms, r.withdrawn))

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
            self.dialect.untexts(scopes),
            resource,
            client,
            int(exp),
            bool(withdrawn),
        )

    async def withdraw_agent_tokens(self, home: str, agent_key: bytes) -> int:
        """See `Store.withdraw_agent_tokens`."""
        return await self._exec(
            "UPDATE tokens SET withdrawn = TRUE WHERE home = ? AND agent_key = ?",
            (home, agent_key),
        )

    async def drop_agent_tokens(self, home: str, agent_key: bytes) -> int:
        """See `Store.drop_agent_tokens`."""
        return await self._exec(
            "DELETE FROM tokens WHERE home = ? AND agent_key = ?", (home, agent_key)
        )

    async def drop_token(self, token_hash: bytes) -> int:
        """See `BridgeStore.drop_token`."""
        return await self._exec("DELETE FROM tokens WHERE hash = ?", (token_hash,))

    async def put_client(
        self, client_id: str, metadata: dict[str, Any], expires_at_ms: int
    ) -> None:
        """See `BridgeStore.put_client`."""
        await self._exec(_CLIENT, (client_id, self.dialect.json(metadata), expires_at_ms))

    async def client(self, client_id: str, now_ms: int) -> dict[str, Any] | None:
        """See `BridgeStore.client`."""
        row = await self._one(
            "SELECT metadata FROM oauth_clients WHERE client_id = ? AND expires_at_ms > ?",
            (client_id, now_ms),
        )
        return None if row is None else dict(self.dialect.unjson(row[0]))

    async def purge_clients(self, now_ms: int) -> None:
        """See `BridgeStore.purge_clients`."""
        await self._exec("DELETE FROM oauth_clients WHERE expires_at_ms <= ?", (now_ms,))

    async def refresh_record(self, token_hash: bytes, now_ms: int) -> dict[str, Any] | None:
        """See `BridgeStore.refresh_record`."""
        row = await self._one(
            "SELECT record FROM refresh_tokens WHERE hash = ? AND expires_at_ms > ?",
            (token_hash, now_ms),
        )
        return None if row is None else dict(self.dialect.unjson(row[0]))

    async def put_refresh(
        self, token_hash: bytes, family: str, record: dict[str, Any], expires_at_ms: int
    ) -> None:
        """See `BridgeStore.put_refresh`."""
        await self._exec(
            "INSERT INTO refresh_tokens VALUES (?, ?, FALSE, ?, ?)",
            (token_hash, family, self.dialect.json(record), expires_at_ms),
            idempotent=False,  # a second try after a commit would meet its own row
        )

    async def use_refresh(
        self, token_hash: bytes, now_ms: int
    ) -> tuple[str, bool, dict[str, Any]] | None:
        """See `BridgeStore.use_refresh`: atomic across instances and processes, so of two
        presenting the same refresh token at once, the second sees it used (the reuse RFC
        9700 section 4.14.2 revokes the family for). Never tried twice: a second try would
        find it used by the first, a false reuse."""
        return await self.call(
            lambda db: self.dialect.use_refresh(db, token_hash, now_ms), idempotent=False
        )

    async def drop_family(self, family: str) -> None:
        """See `BridgeStore.drop_family`."""
        await self._exec("DELETE FROM refresh_tokens WHERE family = ?", (family,))

    async def drop_refresh_of_agent(self, home: str, agent_key: bytes) -> None:
        """See `BridgeStore.drop_refresh_of_agent`."""
        d = self.dialect
        await self._exec(
            f"DELETE FROM refresh_tokens WHERE {d.json_text('record', 'home')} = ?"
            f" AND {d.json_text('record', 'agentKey')} = ?",
            (home, agent_key.hex()),
        )

    async def put_oauth_state(
        self, kind: str, key: str, record: dict[str, Any], expires_at_ms: int
    ) -> None:
        """See `OAuthStore.put_oauth_state` (ftwbridge/oauth/model.py)."""
        await self._exec(_STATE, (kind, key, self.dialect.json(record), expires_at_ms))

    async def drop_oauth_state(self, kind: str, key: str) -> None:
        """See `OAuthStore.drop_oauth_state`."""
        await self._exec("DELETE FROM oauth_state WHERE kind = ? AND key = ?", (kind, key))

    async def oauth_states(self, kind: str, now_ms: int) -> Found:
        """See `OAuthStore.oauth_states`."""
        d = self.dialect
        purge = d.sql("DELETE FROM oauth_state WHERE kind = ? AND expires_at_ms <= ?")
        read = d.sql(
            "SELECT key, record, expires_at_ms FROM oauth_state WHERE kind = ? ORDER BY key"
        )

        def work(db: Connection) -> Found:
            db.execute(purge, (kind, now_ms))
            rows = db.execute(read, (kind,)).fetchall()
            return [(str(k), dict(d.unjson(r)), int(e)) for k, r, e in rows]

        return await self.call(work)

    async def oauth_state(
        self, kind: str, key: str, now_ms: int
    ) -> tuple[dict[str, Any], int] | None:
        """See `OAuthStore.oauth_state`."""
        row = await self._one(
            "SELECT record, expires_at_ms FROM oauth_state"
            " WHERE kind = ? AND key = ? AND expires_at_ms > ?",
            (kind, key, now_ms),
        )
        return None if row is None else (dict(self.dialect.unjson(row[0])), int(row[1]))

    async def change_oauth_state(
        self,
        kind: str,
        key: str,
        changes: dict[str, Any],
        now_ms: int,
        *,
        where: dict[str, Any] | None = None,
    ) -> dict[str, Any] | None:
        """See `OAuthStore.change_oauth_state`: read, compare and write atomically, so of two
        writers (instances, or processes on one file) changing the same item from the same
        state, one does and the other finds it changed. Never tried twice (a second try after
        a commit would not match)."""
        return await self.call(
            lambda db: self.dialect.change_state(db, kind, key, changes, now_ms, where),
            idempotent=False,
        )

    async def take_oauth_state(
        self, kind: str, key: str, now_ms: int, *, where: dict[str, Any] | None = None
    ) -> dict[str, Any] | None:
        """See `OAuthStore.take_oauth_state`: atomically, so one writer takes the item. Never
        tried twice (a second try would find it gone)."""
        return await self.call(
            lambda db: self.dialect.take_state(db, kind, key, now_ms, where), idempotent=False
        )

    async def find_oauth_states(self, kind: str, now_ms: int, where: dict[str, Any]) -> Found:
        """See `OAuthStore.find_oauth_states` (PostgreSQL: JSONB containment, served by the
        GIN index of migrations/0006_oauth_state_shared.sql; SQLite: matched in Python)."""
        d = self.dialect
        test, extra, keep = d.matching(where)
        sql = d.sql(
            "SELECT key, record, expires_at_ms FROM oauth_state"
            f" WHERE kind = ? AND expires_at_ms > ?{test} ORDER BY key"
        )

        def work(db: Connection) -> Found:
            rows = db.execute(sql, (kind, now_ms, *extra)).fetchall()
            found = [(str(k), dict(d.unjson(r)), int(e)) for k, r, e in rows]
            return [item for item in found if keep(item[1])]

        return await self.call(work)

    async def expire_oauth_states(self, kind: str, now_ms: int) -> Found:
        """See `OAuthStore.expire_oauth_states`: atomically, so each expired item is returned
        to one instance only."""
        return await self.call(
            lambda db: self.dialect.expire_states(db, kind, now_ms), idempotent=False
        )

    async def drop_oauth_states(self, kind: str, where: dict[str, Any]) -> int:
        """See `OAuthStore.drop_oauth_states` (atomically)."""
        return await self.call(lambda db: self.dialect.drop_states(db, kind, where))

    async def count_oauth_states(self, kind: str, now_ms: int) -> int:
        """See `OAuthStore.count_oauth_states` (PostgreSQL: the `oauth_state_expiry` index of
        migrations/0006_oauth_state_shared.sql)."""
        row = await self._one(
            "SELECT COUNT(*) FROM oauth_state WHERE kind = ? AND expires_at_ms > ?",
            (kind, now_ms),
        )
        return int(row[0])
