"""Events every instance must hear, over PostgreSQL's LISTEN/NOTIFY (docs/operations.md, "Many instances").

Triggers (migrations/0003_events.sql) send one NOTIFY on the channel `CHANNEL` in the same
transaction as each change: a home's roster (`roster`), a home enrolled or re-enrolled
(`enroll`), an agent's tokens dropped or withdrawn (`revoke`: every instance drops its cached
tokens and grants of that agent), a home's uplink claimed (`takeover`), and a home's claim
offer written (`claim`, migrations/0006_oauth_state_shared.sql; instances ignore it). `Events.serve`
keeps one connection of its own LISTENing and waits on its socket in trio
(`trio.lowlevel.wait_readable`), with no thread and no polling. When that connection is lost,
the events sent meanwhile are lost with it: `on_gap` is awaited once it listens again, and the
caller drops every cache the events keep true before it trusts them again.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import psycopg
import trio

from .base import StoreError
from .postgres import Conn, PgStore, first_line

log = logging.getLogger("ftwbridge.store")

CHANNEL = "ftwbridge"
"""The one NOTIFY channel of every event."""
KINDS = frozenset({"roster", "enroll", "revoke", "takeover", "claim"})
"""The events' kinds (migrations/0003_events.sql)."""
RETRY_S = (0.5, 1.0, 2.0, 5.0)
"""Waits between attempts to LISTEN again after the connection was lost, seconds (the last
one repeats)."""
KEEPALIVE = {
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 3,
}
"""libpq's TCP keepalives on the LISTEN connection: a database host that vanished without a
reset is noticed within about 25 s rather than the system's default two hours."""


@dataclass(frozen=True, slots=True)
class Event:
    """One change every instance hears: its `kind` (in `KINDS`), the `home`, and the kind's
    `fields`: `seq` (roster), `agentKey` (revoke, hex of the 32-byte key), `epoch` and
    `instance` (takeover)."""

    kind: str
    home: str
    fields: dict[str, Any] = field(default_factory=dict)


def parse_event(payload: str) -> Event | None:
    """The event of a NOTIFY payload, or None for one that is not ours (not a JSON object,
    an unknown kind, no home). Pure."""
    try:
        data = json.loads(payload)
    except ValueError:
        return None
    if not isinstance(data, dict) or data.get("kind") not in KINDS:
        return None
    home = data.pop("home", None)
    if not isinstance(home, str):
        return None
    return Event(str(data.pop("kind")), home, data)


OnEvent = Callable[[Event], Awaitable[None]]
OnGap = Callable[[], Awaitable[None]]


class Events:
    """The LISTEN side of the events, on `store`'s database.

    Args:
        store: the started `PgStore` (its URL; the LISTEN connection is one of its own).
    """

    def __init__(self, store: PgStore) -> None:
        self._store = store

    async def _listen(self) -> Conn:
        def work() -> Conn:
            conn = self._store.connect(**KEEPALIVE)
            try:
                conn.execute(f"LISTEN {CHANNEL}")
            except BaseException:
                conn.close()
                raise
            return conn

        return await self._store.thread(work, abandon_on_cancel=False)

    async def serve(
        self,
        on_event: OnEvent,
        on_gap: OnGap,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Until cancelled: await `on_event` for each event, in the order of their commits.
        Reports started once it listens. When the connection is lost it logs one warning,
        listens again (waiting `RETRY_S` between attempts), logs that, and awaits `on_gap`.

        Raises:
            StoreError: (before started) the database does not answer.
        """
        conn = await self._listen()
        task_status.started()
        try:
            while True:
                try:
                    await self._pump(conn, on_event)
                except psycopg.OperationalError as exc:
                    log.warning(
                        "events: the LISTEN connection to %s was lost (%s); caches are"
                        " dropped once it listens again",
                        self._store.where,
                        first_line(exc),
                    )
                conn.close()
                conn = await self._listen_again()
                log.warning("events: listening again on %s", self._store.where)
                await on_gap()
        finally:
            conn.close()

    async def _listen_again(self) -> Conn:
        for attempt in itertools.count():
            await trio.sleep(RETRY_S[min(attempt, len(RETRY_S) - 1)])
            with contextlib.suppress(StoreError):
                return await self._listen()
        raise AssertionError("unreachable")

    async def _pump(self, conn: Conn, on_event: OnEvent) -> None:
        """Wait for the socket, read what came, hand each event over; returns never.

        Raises:
            psycopg.OperationalError: the connection was lost.
        """
        pg = conn.pgconn
        while True:
            await trio.lowlevel.wait_readable(conn.fileno())
            pg.consume_input()
            if pg.status != psycopg.pq.ConnStatus.OK:
                raise psycopg.OperationalError("the connection is closed")
            while (notify := pg.notifies()) is not None:
                event = parse_event(notify.extra.decode("utf-8", "replace"))
                if event is None:
                    log.warning("events: a payload that is not an event was ignored")
                    continue
                await on_event(event)
