"""`Store` on PostgreSQL (`database_url`): psycopg 3 with a `psycopg_pool` connection pool.

psycopg's async API needs asyncio, so every query runs in a worker thread through
`trio.to_thread.run_sync`, under this store's own `CapacityLimiter` as wide as the pool: a
caller waits for a connection in trio (where a cancel scope can end the wait), never inside
the pool. Connections run in autocommit, one statement per round trip; each method is one
statement, so each is atomic on its own. Errors of the connection (PostgreSQL down, restarting,
unreachable) become `StoreError` at this one edge; the schema is brought up to date by
`start` (`ftwbridge.store.migrate`). The store's methods are `SqlStore`'s (`sql.py`);
`PgDialect` says in PostgreSQL what the engines do not say alike.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any, TypeVar, cast

import psycopg
import trio
from psycopg.conninfo import conninfo_to_dict
from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool

from . import migrate
from .base import StoreError
from .dialect import Connection, Dialect, Found, Matcher
from .sql import SqlStore
from .sql import first_line as first_line  # said here too: the directory, events, importer

T = TypeVar("T")
log = logging.getLogger("ftwbridge.store")

CONNECTIONS = 10
"""The pool's and the limiter's width: queries in flight at once per instance."""
CONNECT_S = 10
"""The longest a new connection may take (libpq's `connect_timeout`), and `start`'s bound on
the pool's first connections, seconds."""
POOL_WAIT_S = 2.0
"""The longest a query waits for a connection inside the pool, seconds. The limiter keeps
queries from queueing there, so a wait is for a connection being made: past this PostgreSQL
is taken as down and the query ends in `StoreError` rather than hold its caller."""
Conn = psycopg.Connection[Any]


def describe(url: str) -> str:
    """`url` as an operator may read it in a log or an error: database, host and port, never
    the password (e.g. `PostgreSQL database ftw at db.internal:5432`).

    Raises:
        StoreError: `url` is not a libpq connection string or URL.
    """
    try:
        parts = conninfo_to_dict(url)
    except psycopg.ProgrammingError as exc:
        raise StoreError(f"database_url cannot be read: {first_line(exc)}") from None
    host = str(parts.get("host") or parts.get("hostaddr") or "the local socket")
    port = f":{parts['port']}" if parts.get("port") else ""
    name = parts.get("dbname") or parts.get("user") or "(default)"
    return f"PostgreSQL database {name} at {host}{port}"


def unreachable(where: str, exc: BaseException) -> str:
    """One sentence for a failed connection to `where`: the server's own refusal when it gave
    one (a database that does not exist, a wrong password: libpq's "FATAL:" line), otherwise
    that it does not answer."""
    line = first_line(exc)
    _, fatal, reason = line.partition("FATAL:")
    if fatal:
        return f"{where} refuses the connection: {reason.strip()}"
    return f"{where} does not answer: {line}"


class PgDialect(Dialect):
    """`Dialect` of PostgreSQL: `%s` placeholders, JSONB, `TEXT[]`, and each read-then-write
    in one statement (`RETURNING`, a row lock `FOR UPDATE`, JSONB containment `record @>
    where`), so it is atomic against every other instance without a transaction of its own
    (connections are in autocommit)."""

    write_mark = "SELECT value FROM write_marks WHERE name = 'homes'"
    row_lock = " FOR UPDATE"
    error = psycopg.Error

    def transaction(self, db: Connection) -> AbstractContextManager[object]:
        """See `Dialect.transaction`: psycopg's (READ COMMITTED)."""
        return cast(Conn, db).transaction()

    def sql(self, statement: str) -> str:
        """See `Dialect.sql`: `%s` for `?` (the shared statements have no `%` and no `?`
        operator)."""
        return statement.replace("?", "%s")

    def json(self, value: Any) -> Any:
        """See `Dialect.json`: JSONB."""
        return Jsonb(value)

    def unjson(self, value: Any) -> Any:
        """See `Dialect.unjson`: psycopg reads JSONB as Python values already."""
        return value

    def texts(self, values: list[str]) -> Any:
        """See `Dialect.texts`: `TEXT[]`."""
        return values

    def untexts(self, value: Any) -> tuple[str, ...]:
        """See `Dialect.untexts`."""
        return tuple(value)

    def json_text(self, column: str, field: str) -> str:
        """See `Dialect.json_text` (`->>`, the expression the `refresh_agent` index has)."""
        return f"{column} ->> '{field}'"

    def among(self, values: list[str]) -> Iterator[tuple[str, tuple[Any, ...]]]:
        """See `Dialect.among`: one array parameter."""
        yield "= ANY(?)", (values,)

    def matching(self, where: dict[str, Any]) -> tuple[str, tuple[Any, ...], Matcher]:
        """See `Dialect.matching`: JSONB containment in the statement."""
        return " AND record @> ?", (Jsonb(where),), lambda record: True

    def use_refresh(
        self, db: Connection, token_hash: bytes, now_ms: int
    ) -> tuple[str, bool, dict[str, Any]] | None:
        """See `Dialect.use_refresh`: one statement that locks the row (`FOR UPDATE`), so of
        two instances at once the second waits and then sees it used."""
        row = db.execute(
            "UPDATE refresh_tokens AS r SET used = TRUE FROM (SELECT hash, used FROM"
            " refresh_tokens WHERE hash = %s AND expires_at_ms > %s FOR UPDATE) AS old"
            " WHERE r.hash = old.hash RETURNING r.family, old.used, r.record",
            (token_hash, now_ms),
        ).fetchone()
        return None if row is None else (str(row[0]), bool(row[1]), dict(row[2]))

    def change_state(
        self,
        db: Connection,
        kind: str,
        key: str,
        changes: dict[str, Any],
        now_ms: int,
        where: dict[str, Any] | None,
    ) -> dict[str, Any] | None:
        """See `Dialect.change_state`: one conditional UPDATE ... RETURNING."""
        row = db.execute(
            "UPDATE oauth_state SET record = record || %s"
            " WHERE kind = %s AND key = %s AND expires_at_ms > %s AND record @> %s"
            " RETURNING record",
            (Jsonb(changes), kind, key, now_ms, Jsonb(where or {})),
        ).fetchone()
        return None if row is None else dict(row[0])

    def take_state(
        self, db: Connection, kind: str, key: str, now_ms: int, where: dict[str, Any] | None
    ) -> dict[str, Any] | None:
        """See `Dialect.take_state`: one DELETE ... RETURNING."""
        row = db.execute(
            "DELETE FROM oauth_state WHERE kind = %s AND key = %s AND record @> %s"
            " RETURNING record, expires_at_ms",
            (kind, key, Jsonb(where or {})),
        ).fetchone()
        return None if row is None or int(row[1]) <= now_ms else dict(row[0])

    def expire_states(self, db: Connection, kind: str, now_ms: int) -> Found:
        """See `Dialect.expire_states`: one DELETE ... RETURNING."""
        rows = db.execute(
            "DELETE FROM oauth_state WHERE kind = %s AND expires_at_ms <= %s"
            " RETURNING key, record, expires_at_ms",
            (kind, now_ms),
        ).fetchall()
        return sorted((str(k), dict(r), int(e)) for k, r, e in rows)

    def drop_states(self, db: Connection, kind: str, where: dict[str, Any]) -> int:
        """See `Dialect.drop_states`: one DELETE."""
        return db.execute(
            "DELETE FROM oauth_state WHERE kind = %s AND record @> %s", (kind, Jsonb(where))
        ).rowcount

    def sync_keys(self, db: Connection, home: str, wanted: list[bytes]) -> list[bytes]:
        """See `Dialect.sync_keys`: one transaction of an UPDATE and a DELETE ... RETURNING."""
        with self.transaction(db):
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


POSTGRES = PgDialect()
"""The one PostgreSQL dialect (it keeps nothing)."""


class PgStore(SqlStore):
    """`BridgeStore` on PostgreSQL, shared by every instance that has the same `database_url`.

    Nothing is connected until `start`, which migrates the schema and opens the pool.

    Args:
        url: a libpq URL or connection string (`postgresql://user:pw@host:5432/db`).
        connections: the pool's size and the limiter's width.
        wait_s: the longest a query waits for a connection to be made, seconds.

    Raises:
        StoreError: `url` cannot be read.
    """

    def __init__(
        self, url: str, *, connections: int = CONNECTIONS, wait_s: float = POOL_WAIT_S
    ) -> None:
        super().__init__(POSTGRES, describe(url))
        self._url = url
        extra: dict[str, Any] = {"autocommit": True}
        if "connect_timeout" not in conninfo_to_dict(url):
            extra["connect_timeout"] = CONNECT_S
        self._extra = extra
        self._limiter = trio.CapacityLimiter(connections)
        self._pool: ConnectionPool[Conn] = ConnectionPool(
            url,
            kwargs=extra,
            min_size=min(2, connections),
            max_size=connections,
            open=False,
            timeout=wait_s,
            name="ftwbridge-store",
        )

    async def start(self) -> list[str]:
        """See `BridgeStore.start`: one direct connection first, so that a database that
        cannot be reached is said with libpq's own reason; the migrations on it; then the
        pool. Logs (warning) the versions the database has that this bridge does not know.

        Raises:
            StoreError: the database cannot be reached, or a migration failed.
        """

        def work() -> migrate.Outcome:
            with psycopg.connect(self._url, **self._extra) as conn:
                outcome = migrate.apply(conn)
            self._pool.open(wait=True, timeout=CONNECT_S)
            return outcome

        try:
            outcome = await self.thread(work)
        except psycopg.Error as exc:  # a migration's SQL: the schema is as it was
            raise StoreError(f"{self.where} cannot be migrated: {first_line(exc)}") from None
        if outcome.unknown:
            log.warning(
                "%s has migrations this bridge does not know (versions %s): a newer bridge"
                " migrated it; running on, as migrations only add",
                self.where,
                ", ".join(map(str, outcome.unknown)),
            )
        return list(outcome.applied)

    def connect(self, **options: Any) -> Conn:
        """A connection of its own, outside the pool, in autocommit (blocking: call it in a
        worker thread), with libpq `options` added. For what must live with one connection:
        the directory's presence, the events' LISTEN.

        Raises:
            psycopg.OperationalError: the database cannot be reached.
        """
        return psycopg.connect(self._url, **{**self._extra, **options})

    def close(self) -> None:
        """Close the pool (waits at most 1 s for its worker threads)."""
        self._pool.close(timeout=1.0)

    async def thread(
        self,
        work: Callable[[], T],
        *,
        limiter: trio.CapacityLimiter | None = None,
        abandon_on_cancel: bool = True,
    ) -> T:
        """Run blocking `work` (psycopg calls) in a worker thread under `limiter` (default:
        the pool's); a cancelled caller leaves it to finish alone unless `abandon_on_cancel`
        is False (work on a connection the caller closes after).

        Raises:
            StoreError: the connection failed (`psycopg.OperationalError`), in one sentence
                naming the database.
        """
        try:
            return await trio.to_thread.run_sync(
                work,
                limiter=self._limiter if limiter is None else limiter,
                abandon_on_cancel=abandon_on_cancel,
            )
        except psycopg.OperationalError as exc:  # PoolTimeout is one too
            raise StoreError(unreachable(self.where, exc)) from None

    async def query(self, fn: Callable[[Conn], T], *, idempotent: bool = True) -> T:
        """`fn` on a pooled connection in a worker thread. When the connection fails under
        it (PostgreSQL restarted, or an operator ended its backend), the pool drops it and
        checks its other idle ones (`ConnectionPool.check`); an `idempotent` statement is
        then tried once more, any other is not, as it may have committed before the break."""

        def work() -> T:
            for attempt in (1, 2):
                with self._pool.connection() as conn:
                    try:
                        return fn(conn)
                    except psycopg.OperationalError:
                        if not idempotent or attempt == 2:
                            raise
                self._pool.check()
            raise AssertionError("unreachable")  # the second attempt returned or raised

        return await self.thread(work)

    async def call(self, fn: Callable[[Connection], T], *, idempotent: bool = True) -> T:
        """See `SqlStore.call`: `query`."""
        return await self.query(fn, idempotent=idempotent)
