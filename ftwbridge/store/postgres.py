"""`Store` on PostgreSQL (`database_url`): psycopg 3 with a `psycopg_pool` connection pool.

psycopg's async API needs asyncio, so every query runs in a worker thread through
`trio.to_thread.run_sync`, under this store's own `CapacityLimiter` as wide as the pool: a
caller waits for a connection in trio (where a cancel scope can end the wait), never inside
the pool. Connections run in autocommit, one statement per round trip; each method is one
statement, so each is atomic on its own. Errors of the connection (PostgreSQL down, restarting,
unreachable) become `StoreError` at this one edge; the schema is brought up to date by
`start` (`ftwbridge.store.migrate`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from typing import Any, TypeVar

import psycopg
import trio
from psycopg.conninfo import conninfo_to_dict
from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool

from . import migrate
from .base import StoreError, TokenRecord

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


def first_line(exc: BaseException) -> str:
    """The first line of an error's text (libpq's messages run on with DETAIL and HINT)."""
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def unreachable(where: str, exc: BaseException) -> str:
    """One sentence for a failed connection to `where`: the server's own refusal when it gave
    one (a database that does not exist, a wrong password: libpq's "FATAL:" line), otherwise
    that it does not answer."""
    line = first_line(exc)
    _, fatal, reason = line.partition("FATAL:")
    if fatal:
        return f"{where} refuses the connection: {reason.strip()}"
    return f"{where} does not answer: {line}"


class PgStore:
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
        self.where = describe(url)
        self._url = url
        extra: dict[str, Any] = {"autocommit": True}
        if "connect_timeout" not in conninfo_to_dict(url):
            extra["connect_timeout"] = CONNECT_S
        self._extra = extra
        self._limiter = trio.CapacityLimiter(connections)
        self._mark: int | None = None
        """The last `write_mark` read, given again while the database does not answer."""
        self._outage = False
        """Whether the last `write_mark` found the database not answering."""
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

    async def _exec(self, sql: str, args: tuple[Any, ...], *, idempotent: bool = True) -> int:
        return await self.query(lambda db: db.execute(sql, args).rowcount, idempotent=idempotent)

    async def _one(self, sql: str, args: tuple[Any, ...], *, idempotent: bool = True) -> Any:
        return await self.query(lambda db: db.execute(sql, args).fetchone(), idempotent=idempotent)

    async def enroll_home(self, home: str, public_key: bytes) -> None:
        """See `Store.enroll_home`."""
        await self._exec(
            "INSERT INTO homes VALUES (%s, %s)"
            " ON CONFLICT (home) DO UPDATE SET public_key = EXCLUDED.public_key",
            (home, public_key),
        )

    async def home_key(self, home: str) -> bytes | None:
        """See `Store.home_key`."""
        row = await self._one("SELECT public_key FROM homes WHERE home = %s", (home,))
        return None if row is None else bytes(row[0])

    async def home_keys(self, homes: Collection[str]) -> dict[str, bytes]:
        """See `Store.home_keys`."""
        wanted = list(homes)

        def work(db: Conn) -> dict[str, bytes]:
            rows = db.execute(
                "SELECT home, public_key FROM homes WHERE home = ANY(%s)", (wanted,)
            ).fetchall()
            return {str(home): bytes(key) for home, key in rows}

        return await self.query(work)

    async def write_mark(self) -> int:
        """See `Store.write_mark`: a counter the `homes_written` trigger grows in the same
        transaction as any change to `homes` (migrations/0001_initial.sql).

        While the database does not answer, the last mark read is given again and a warning
        logged once: the door polls this every second, and an instance keeps serving the
        homes it holds through an outage (`/readyz` says the store does not answer); a change
        made meanwhile is noticed on the first poll that reaches the database.

        Raises:
            StoreError: the database has not answered once yet.
        """
        try:
            row = await self._one("SELECT value FROM write_marks WHERE name = 'homes'", ())
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
        await self._exec(
            "INSERT INTO rosters VALUES (%s, %s, %s) ON CONFLICT (home)"
            " DO UPDATE SET seq = EXCLUDED.seq, signed = EXCLUDED.signed",
            (home, seq, signed),
        )

    async def roster(self, home: str) -> tuple[int, bytes] | None:
        """See `Store.roster`."""
        row = await self._one("SELECT seq, signed FROM rosters WHERE home = %s", (home,))
        return None if row is None else (int(row[0]), bytes(row[1]))

    async def put_token(self, token_hash: bytes, record: TokenRecord) -> None:
        """See `Store.put_token`."""
        r = record
        await self._exec(
            "INSERT INTO tokens VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT (hash)"
            " DO UPDATE SET home = EXCLUDED.home, agent_id = EXCLUDED.agent_id,"
            " agent_key = EXCLUDED.agent_key, scopes = EXCLUDED.scopes,"
            " resource = EXCLUDED.resource, client = EXCLUDED.client,"
            " expires_at_ms = EXCLUDED.expires_at_ms, withdrawn = EXCLUDED.withdrawn",
            (
                token_hash,
                r.home,
                r.agent_id,
                r.agent_key,
                list(r.scopes),
                r.resource,
                r.client,
                r.expires_at_ms,
                r.withdrawn,
            ),
        )

    async def token(self, token_hash: bytes) -> TokenRecord | None:
        """See `Store.token`."""
        row = await self._one(
            "SELECT home, agent_id, agent_key, scopes, resource, client, expires_at_ms, withdrawn"
            " FROM tokens WHERE hash = %s",
            (token_hash,),
        )
        if row is None:
            return None
        home, agent_id, key, scopes, resource, client, exp, withdrawn = row
        return TokenRecord(
            home, agent_id, bytes(key), tuple(scopes), resource, client, int(exp), bool(withdrawn)
        )

    async def withdraw_agent_tokens(self, home: str, agent_key: bytes) -> int:
        """See `Store.withdraw_agent_tokens`."""
        return await self._exec(
            "UPDATE tokens SET withdrawn = TRUE WHERE home = %s AND agent_key = %s",
            (home, agent_key),
        )

    async def drop_agent_tokens(self, home: str, agent_key: bytes) -> int:
        """See `Store.drop_agent_tokens`."""
        return await self._exec(
            "DELETE FROM tokens WHERE home = %s AND agent_key = %s", (home, agent_key)
        )

    async def drop_token(self, token_hash: bytes) -> int:
        """See `BridgeStore.drop_token`."""
        return await self._exec("DELETE FROM tokens WHERE hash = %s", (token_hash,))

    async def put_client(
        self, client_id: str, metadata: dict[str, Any], expires_at_ms: int
    ) -> None:
        """See `BridgeStore.put_client`."""
        await self._exec(
            "INSERT INTO oauth_clients VALUES (%s, %s, %s) ON CONFLICT (client_id)"
            " DO UPDATE SET metadata = EXCLUDED.metadata, expires_at_ms = EXCLUDED.expires_at_ms",
            (client_id, Jsonb(metadata), expires_at_ms),
        )

    async def client(self, client_id: str, now_ms: int) -> dict[str, Any] | None:
        """See `BridgeStore.client`."""
        row = await self._one(
            "SELECT metadata FROM oauth_clients WHERE client_id = %s AND expires_at_ms > %s",
            (client_id, now_ms),
        )
        return None if row is None else dict(row[0])

    async def purge_clients(self, now_ms: int) -> None:
        """See `BridgeStore.purge_clients`."""
        await self._exec("DELETE FROM oauth_clients WHERE expires_at_ms <= %s", (now_ms,))

    async def put_oauth_state(
        self, kind: str, key: str, record: dict[str, Any], expires_at_ms: int
    ) -> None:
        """See `OAuthStore.put_oauth_state` (ftwbridge/oauth/model.py)."""
        await self._exec(
            "INSERT INTO oauth_state VALUES (%s, %s, %s, %s) ON CONFLICT (kind, key)"
            " DO UPDATE SET record = EXCLUDED.record, expires_at_ms = EXCLUDED.expires_at_ms",
            (kind, key, Jsonb(record), expires_at_ms),
        )

    async def drop_oauth_state(self, kind: str, key: str) -> None:
        """See `OAuthStore.drop_oauth_state`."""
        await self._exec("DELETE FROM oauth_state WHERE kind = %s AND key = %s", (kind, key))

    async def oauth_states(self, kind: str, now_ms: int) -> list[tuple[str, dict[str, Any], int]]:
        """See `OAuthStore.oauth_states`."""

        def work(db: Conn) -> list[tuple[str, dict[str, Any], int]]:
            db.execute(
                "DELETE FROM oauth_state WHERE kind = %s AND expires_at_ms <= %s", (kind, now_ms)
            )
            rows = db.execute(
                "SELECT key, record, expires_at_ms FROM oauth_state WHERE kind = %s ORDER BY key",
                (kind,),
            ).fetchall()
            return [(str(k), dict(r), int(e)) for k, r, e in rows]

        return await self.query(work)

    async def refresh_record(self, token_hash: bytes, now_ms: int) -> dict[str, Any] | None:
        """See `BridgeStore.refresh_record`."""
        row = await self._one(
            "SELECT record FROM refresh_tokens WHERE hash = %s AND expires_at_ms > %s",
            (token_hash, now_ms),
        )
        return None if row is None else dict(row[0])

    async def put_refresh(
        self, token_hash: bytes, family: str, record: dict[str, Any], expires_at_ms: int
    ) -> None:
        """See `BridgeStore.put_refresh`."""
        await self._exec(
            "INSERT INTO refresh_tokens VALUES (%s, %s, FALSE, %s, %s)",
            (token_hash, family, Jsonb(record), expires_at_ms),
            idempotent=False,  # a second try after a commit would meet its own row
        )

    async def use_refresh(
        self, token_hash: bytes, now_ms: int
    ) -> tuple[str, bool, dict[str, Any]] | None:
        """See `BridgeStore.use_refresh`: one statement that locks the row (`FOR UPDATE`), so
        of two instances presenting the same refresh token at once, the second sees it used
        (the reuse RFC 9700 section 4.14.2 revokes the family for)."""
        row = await self._one(
            "UPDATE refresh_tokens AS r SET used = TRUE FROM (SELECT hash, used FROM"
            " refresh_tokens WHERE hash = %s AND expires_at_ms > %s FOR UPDATE) AS old"
            " WHERE r.hash = old.hash RETURNING r.family, old.used, r.record",
            (token_hash, now_ms),
            idempotent=False,  # a second try would find it used by the first: a false reuse
        )
        return None if row is None else (str(row[0]), bool(row[1]), dict(row[2]))

    async def drop_family(self, family: str) -> None:
        """See `BridgeStore.drop_family`."""
        await self._exec("DELETE FROM refresh_tokens WHERE family = %s", (family,))

    async def drop_refresh_of_agent(self, home: str, agent_key: bytes) -> None:
        """See `BridgeStore.drop_refresh_of_agent`."""
        await self._exec(
            "DELETE FROM refresh_tokens WHERE record ->> 'home' = %s"
            " AND record ->> 'agentKey' = %s",
            (home, agent_key.hex()),
        )

    async def oauth_state(
        self, kind: str, key: str, now_ms: int
    ) -> tuple[dict[str, Any], int] | None:
        """See `OAuthStore.oauth_state`."""
        row = await self._one(
            "SELECT record, expires_at_ms FROM oauth_state"
            " WHERE kind = %s AND key = %s AND expires_at_ms > %s",
            (kind, key, now_ms),
        )
        return None if row is None else (dict(row[0]), int(row[1]))

    async def change_oauth_state(
        self,
        kind: str,
        key: str,
        changes: dict[str, Any],
        now_ms: int,
        *,
        where: dict[str, Any] | None = None,
    ) -> dict[str, Any] | None:
        """See `OAuthStore.change_oauth_state`: one conditional UPDATE ... RETURNING, so of
        two instances changing the same item from the same state, one does and the other
        finds it changed. Never tried twice (a second try after a commit would not match)."""
        row = await self._one(
            "UPDATE oauth_state SET record = record || %s"
            " WHERE kind = %s AND key = %s AND expires_at_ms > %s AND record @> %s"
            " RETURNING record",
            (Jsonb(changes), kind, key, now_ms, Jsonb(where or {})),
            idempotent=False,
        )
        return None if row is None else dict(row[0])

    async def take_oauth_state(
        self, kind: str, key: str, now_ms: int, *, where: dict[str, Any] | None = None
    ) -> dict[str, Any] | None:
        """See `OAuthStore.take_oauth_state`: one DELETE ... RETURNING, so one instance takes
        the item. Never tried twice (a second try would find it gone)."""
        row = await self._one(
            "DELETE FROM oauth_state WHERE kind = %s AND key = %s AND record @> %s"
            " RETURNING record, expires_at_ms",
            (kind, key, Jsonb(where or {})),
            idempotent=False,
        )
        return None if row is None or int(row[1]) <= now_ms else dict(row[0])

    async def find_oauth_states(
        self, kind: str, now_ms: int, where: dict[str, Any]
    ) -> list[tuple[str, dict[str, Any], int]]:
        """See `OAuthStore.find_oauth_states` (JSONB containment, served by the GIN index of
        migrations/0006_oauth_state_shared.sql)."""

        def work(db: Conn) -> list[tuple[str, dict[str, Any], int]]:
            rows = db.execute(
                "SELECT key, record, expires_at_ms FROM oauth_state"
                " WHERE kind = %s AND expires_at_ms > %s AND record @> %s ORDER BY key",
                (kind, now_ms, Jsonb(where)),
            ).fetchall()
            return [(str(k), dict(r), int(e)) for k, r, e in rows]

        return await self.query(work)

    async def expire_oauth_states(
        self, kind: str, now_ms: int
    ) -> list[tuple[str, dict[str, Any], int]]:
        """See `OAuthStore.expire_oauth_states`: one DELETE ... RETURNING, so each expired item
        is returned to one instance only."""

        def work(db: Conn) -> list[tuple[str, dict[str, Any], int]]:
            rows = db.execute(
                "DELETE FROM oauth_state WHERE kind = %s AND expires_at_ms <= %s"
                " RETURNING key, record, expires_at_ms",
                (kind, now_ms),
            ).fetchall()
            return sorted((str(k), dict(r), int(e)) for k, r, e in rows)

        return await self.query(work, idempotent=False)

    async def drop_oauth_states(self, kind: str, where: dict[str, Any]) -> int:
        """See `OAuthStore.drop_oauth_states`."""
        return await self._exec(
            "DELETE FROM oauth_state WHERE kind = %s AND record @> %s", (kind, Jsonb(where))
        )

    async def count_oauth_states(self, kind: str, now_ms: int) -> int:
        """See `OAuthStore.count_oauth_states` (the `oauth_state_expiry` index of
        migrations/0006_oauth_state_shared.sql)."""
        row = await self._one(
            "SELECT COUNT(*) FROM oauth_state WHERE kind = %s AND expires_at_ms > %s",
            (kind, now_ms),
        )
        return int(row[0])
