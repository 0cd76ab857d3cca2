"""`Directory` on PostgreSQL (migrations/0002_directory.sql): shared by every instance on
one `database_url`.

An instance is present while two things hold: its presence connection (one of its own,
outside the pool) keeps a session advisory lock `(LOCK_SPACE, lock_id)`, which PostgreSQL
drops the moment that connection ends (a `kill -9`ed process, a lost host's TCP reset); and
its lease, renewed every `renew_s` seconds by one UPDATE of its `instances` row, has not run
out (the backstop for a host that vanished without a reset, whose connection PostgreSQL only
notices after TCP keepalives). `holder` counts only present instances, and each renewal
tells `on_present` which instances are present (`store/known.py` keeps holders in memory with
it, so no call runs a query).

Leases are written and compared on one clock, the database's (`DB_NOW_MS`): an instance whose
own clock is off never ends another's lease early or keeps its own past its time, so a skewed
clock misroutes no home. Each renewal compares the two clocks and logs a warning once when
they differ by more than `SKEW_WARN_MS` (the instance's clock still stamps tokens and the
mesh's signatures, which allow `signing.WINDOW_MS`).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from typing import Any, TypeVar

import psycopg
import trio

from .base import StoreError
from .directory import Holder, OnLost
from .events import Event
from .postgres import Conn, PgStore

T = TypeVar("T")
log = logging.getLogger("ftwbridge.store")

LOCK_SPACE = int.from_bytes(b"ftwb", "big")
"""The first key of every presence advisory lock (the second is the instance's `lock_id`)."""
LEASE_S = 10.0
"""How long a renewal keeps an instance present, seconds."""
LEAVE_S = 2.0
"""The most a stopping instance waits to tell the database it left, seconds."""
RENEW_S = 3.0
"""How often an instance renews its lease (and asks which of its homes were taken), seconds."""
DB_NOW_MS = "(extract(epoch FROM clock_timestamp()) * 1000)::bigint"
"""The database's wall clock in SQL, ms since the Unix epoch: the one clock of leases."""
SKEW_WARN_MS = 2_000
"""An instance's clock this far from the database's (ms) is worth a warning."""

_LOCKED = """EXISTS (
    SELECT 1 FROM pg_locks AS l
    WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
      AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
      AND l.classid::bigint = %s AND l.objid::bigint = i.lock_id)"""
_HOLDER = f"""
SELECT u.instance_id, u.epoch, i.url FROM uplinks AS u JOIN instances AS i USING (instance_id)
WHERE u.home = %s AND i.lease_until_ms > {DB_NOW_MS} AND {_LOCKED}
"""
_PRESENT = f"""
SELECT i.instance_id, i.url FROM instances AS i WHERE i.lease_until_ms > {DB_NOW_MS} AND {_LOCKED}
"""


class PgDirectory:
    """`Directory` on PostgreSQL for the instance `instance_id`, reached by other instances
    at `url` (its internal listener).

    Args:
        store: the started `PgStore` whose pool runs the claims and lookups.
        instance_id: this instance's id, unique among running instances.
        url: this instance's internal URL, as `Holder.url`.
        wall_ms: this instance's wall clock, ms since the epoch: only compared with the
            database's, to warn of a skew (leases are on the database's clock).
        lease_s: how long a renewal keeps this instance present, seconds.
        renew_s: how often `serve` renews, seconds (well under `lease_s`).
    """

    def __init__(
        self,
        store: PgStore,
        *,
        instance_id: str,
        url: str,
        wall_ms: Callable[[], int],
        lease_s: float = LEASE_S,
        renew_s: float = RENEW_S,
    ) -> None:
        self.instance_id = instance_id
        self._store = store
        self._url = url
        self._wall_ms = wall_ms
        self._lease_ms = int(lease_s * 1000)
        self._renew_s = renew_s
        self._presence: Conn | None = None
        self._presence_limiter = trio.CapacityLimiter(1)
        self._held: dict[str, int] = {}
        self._failing = False
        self._skewed = False
        self.on_present: Callable[[dict[str, str]], None] | None = None
        """Told after each renewal the instances present (presence lock held, lease running),
        by id with their internal URL."""

    async def _thread(self, work: Callable[[], T]) -> T:
        """`work` on the presence connection, one at a time, waited for even when cancelled
        (`serve` closes that connection after)."""
        return await self._store.thread(
            work, limiter=self._presence_limiter, abandon_on_cancel=False
        )

    def _become_present(self, *, first: bool) -> Conn:
        """Blocking: open the presence connection, take this instance's lock and start its
        lease; the `first` time, also free the homes its rows still name (claims of its
        previous run, whose uplinks ended with it)."""
        conn = self._store.connect()
        try:
            me = self.instance_id
            conn.execute(
                "INSERT INTO instances (instance_id, url, lease_until_ms) VALUES (%s, %s, 0)"
                " ON CONFLICT (instance_id) DO NOTHING",
                (me, self._url),
            )
            row = conn.execute("SELECT lock_id FROM instances WHERE instance_id = %s", (me,))
            lock_id = row.fetchone()[0]  # type: ignore[index]
            got = conn.execute(
                "SELECT pg_try_advisory_lock(%s::int4, %s::int4)", (LOCK_SPACE, lock_id)
            ).fetchone()
            if not (got and got[0]):
                raise StoreError(
                    f"instance_id {me!r} is in use by another running instance on"
                    f" {self._store.where}; give each instance its own"
                )
            conn.execute(
                f"UPDATE instances SET url = %s, lease_until_ms = {DB_NOW_MS} + %s"
                " WHERE instance_id = %s",
                (self._url, self._lease_ms, me),
            )
            if first:
                conn.execute("UPDATE uplinks SET instance_id = NULL WHERE instance_id = %s", (me,))
        except BaseException:
            conn.close()
            raise
        return conn

    async def serve(
        self, on_lost: OnLost, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """See `Directory.serve`: become present, then every `renew_s` seconds `renew` and
        call `on_lost` for each home taken over. On exit (a stop) it ends its lease and
        frees its claims, which drops it from every lookup at once, then closes the presence
        connection.

        Raises:
            StoreError: (before started) the database does not answer, or another running
                instance has this `instance_id`.
        """
        self._presence = await self._thread(lambda: self._become_present(first=True))
        task_status.started()
        try:
            while True:
                await trio.sleep(self._renew_s)
                for home in await self.renew():
                    await on_lost(home)
        finally:
            with trio.move_on_after(LEAVE_S, shield=True):
                await self._leave()
            if self._presence is not None:
                self._presence.close()
                self._presence = None

    async def _leave(self) -> None:
        """A stop: end the lease and free every claim now, so lookups stop naming this
        instance at once (the presence lock goes only when PostgreSQL's backend has exited,
        a moment after the connection closes). Said nowhere when the database is gone."""
        presence, me = self._presence, self.instance_id
        if presence is None or presence.closed:
            return

        def work() -> None:
            presence.execute(
                "UPDATE instances SET lease_until_ms = 0 WHERE instance_id = %s", (me,)
            )
            presence.execute("UPDATE uplinks SET instance_id = NULL WHERE instance_id = %s", (me,))

        with contextlib.suppress(StoreError, psycopg.Error):
            await self._thread(work)
        self._held.clear()

    async def renew(self) -> list[str]:
        """Renew this instance's lease (one UPDATE for all its homes), making its presence
        again first if the connection was lost; returns the homes it held that another
        instance has claimed since (and forgets them). While the database does not answer,
        logs one warning and returns []."""
        before = dict(self._held)

        def work() -> tuple[dict[str, int], int, dict[str, str]]:
            for attempt in (1, 2):  # a connection found broken is made again at once
                if self._presence is None or self._presence.closed:
                    self._presence = self._become_present(first=False)
                db = self._presence
                try:
                    row = db.execute(
                        f"UPDATE instances SET lease_until_ms = {DB_NOW_MS} + %s"
                        f" WHERE instance_id = %s RETURNING {DB_NOW_MS}",
                        (self._lease_ms, self.instance_id),
                    ).fetchone()
                    skew = self._wall_ms() - int(row[0]) if row else 0
                    rows = db.execute(
                        "SELECT home, epoch FROM uplinks WHERE instance_id = %s",
                        (self.instance_id,),
                    ).fetchall()
                    present = db.execute(_PRESENT, (LOCK_SPACE,)).fetchall()
                    held = {str(home): int(epoch) for home, epoch in rows}
                    return held, skew, {str(i): str(url) for i, url in present}
                except psycopg.OperationalError:
                    db.close()
                    if attempt == 2:
                        raise
            raise AssertionError("unreachable")

        try:
            held, skew_ms, present = await self._thread(work)
        except StoreError as exc:
            if not self._failing:
                log.warning("directory: %s; this instance's lease is renewed when it answers", exc)
                self._failing = True
            return []
        if self._failing:
            log.warning("directory: %s answers again", self._store.where)
            self._failing = False
        self._tell_skew(skew_ms)
        if self.on_present is not None:
            self.on_present(present)
        lost = [h for h, e in before.items() if held.get(h) != e and self._held.get(h) == e]
        for home in lost:
            del self._held[home]
        return lost

    def _tell_skew(self, skew_ms: int) -> None:
        """Warn once when this instance's clock is `SKEW_WARN_MS` or more from the
        database's (and once when it is back within it)."""
        skewed = abs(skew_ms) >= SKEW_WARN_MS
        if skewed and not self._skewed:
            log.warning(
                "directory: this instance's clock is %.1f s %s the database's; leases follow"
                " the database's clock, but tokens and forwarded requests are stamped with"
                " this one (set up NTP)",
                abs(skew_ms) / 1000,
                "ahead of" if skew_ms > 0 else "behind",
            )
        elif self._skewed and not skewed:
            log.warning("directory: this instance's clock agrees with the database's again")
        self._skewed = skewed

    def hear(self, event: Event) -> str | None:
        """A `takeover` event (`ftwbridge.store.events`): the home, when it was this
        instance's and another instance has claimed it since (the caller closes its uplink,
        4409, at once rather than at the next renewal), else None. Pure: no I/O."""
        if event.kind != "takeover" or event.fields.get("instance") == self.instance_id:
            return None
        held = self._held.get(event.home)
        epoch = event.fields.get("epoch")
        if held is None or not isinstance(epoch, int) or epoch <= held:
            return None
        del self._held[event.home]
        return event.home

    async def claim(self, home: str) -> int:
        """See `Directory.claim`: one upsert that takes the home's next epoch.

        Raises:
            StoreError: the database does not answer.
        """

        def work(db: Conn) -> int:
            row = db.execute(
                "INSERT INTO uplinks (home, instance_id, epoch) VALUES (%s, %s, 1)"
                " ON CONFLICT (home) DO UPDATE"
                " SET instance_id = EXCLUDED.instance_id, epoch = uplinks.epoch + 1"
                " RETURNING epoch",
                (home, self.instance_id),
            ).fetchone()
            return int(row[0])  # type: ignore[index]

        epoch = await self._store.query(work, idempotent=False)
        self._held[home] = epoch
        return epoch

    async def release(self, home: str, epoch: int) -> bool:
        """See `Directory.release`.

        Raises:
            StoreError: the database does not answer (the lease then ends the claim).
        """
        if self._held.get(home) == epoch:
            del self._held[home]

        def work(db: Conn) -> int:
            return db.execute(
                "UPDATE uplinks SET instance_id = NULL"
                " WHERE home = %s AND instance_id = %s AND epoch = %s",
                (home, self.instance_id, epoch),
            ).rowcount

        return await self._store.query(work) == 1

    async def holder(self, home: str) -> Holder | None:
        """See `Directory.holder`: only an instance whose presence lock is held and whose
        lease runs.

        Raises:
            StoreError: the database does not answer.
        """

        def work(db: Conn) -> Any:
            return db.execute(_HOLDER, (home, LOCK_SPACE)).fetchone()

        row = await self._store.query(work)
        return None if row is None else Holder(str(row[0]), int(row[1]), str(row[2]))
