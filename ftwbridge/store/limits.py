"""Rate limits kept by the store, shared by every instance on PostgreSQL: a token bucket per (limit name, key).

On PostgreSQL every instance charges the same row of `oauth_limits`
(`migrations/0007_shared_limits.sql`), in one statement that computes the refill from the stored
level and time and takes the tokens only if they are there, so a limit holds for the cluster as
a whole, however a balancer spreads the requests. On SQLite the bridge is one process, and the
buckets stay in its memory (`MemoryLimits`), as before the store kept them.

The arithmetic is `ftwbridge.proto.pacing.TokenBucket`'s: a bucket not seen starts full,
refills at `per_s` tokens a second up to `burst`, and a take needs the tokens now (no debt).
Both forms count time in whole ms and refill `per_s / 1000` a ms, so the SQL below, that formula
written for PostgreSQL, rounds as `TokenBucket` does (tests/store/test_limits.py compares them).
"""

from __future__ import annotations

import logging
import sys
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from ftwbridge.proto.pacing import TokenBucket

if TYPE_CHECKING:
    from .postgres import PgStore

log = logging.getLogger("ftwbridge.store")

MAX_KEYS = 10_000
"""Keys kept per limit name (an address each); past it the least recently charged are
forgotten first, which gives them a full bucket again (the global limits still hold)."""
PURGE_EVERY_MS = 1_000
"""How often an instance deletes the rows of full buckets and those past `MAX_KEYS`, ms."""
EPSILON = 1e-9
"""Token shortfalls below this are float rounding, as in `TokenBucket`."""


@dataclass(frozen=True, slots=True)
class Rate:
    """A limit's shape: `burst` tokens at most, refilled at `per_s` tokens a second.

    Raises:
        ValueError: `burst` or `per_s` is not positive.
    """

    burst: float
    per_s: float

    def __post_init__(self) -> None:
        if self.burst <= 0 or self.per_s <= 0:
            raise ValueError("burst and per_s must be positive")

    @property
    def per_ms(self) -> float:
        """The refill in tokens a ms (both forms count time in ms)."""
        return self.per_s / 1000


class LimitStore(Protocol):
    """Token buckets by (limit name, key), wherever they are kept.

    Raises (every method):
        StoreError: PostgreSQL does not answer (`PgStore.query`); nothing was charged then.
        ValueError: `cost` is above the burst, or not above 0.
    """

    async def take(self, name: str, key: str, rate: Rate, now_ms: int, cost: float = 1.0) -> bool:
        """Take `cost` tokens from the bucket (`name`, `key`) at `now_ms` (ms since the epoch)
        if it holds them; returns whether it did (a refused take changes nothing)."""
        ...

    async def give(self, name: str, key: str, rate: Rate, now_ms: int, cost: float = 1.0) -> None:
        """Put `cost` tokens back (a take whose ask turned out not to count), never above
        the burst."""
        ...


def _check(rate: Rate, cost: float) -> None:
    if not 0 < cost <= rate.burst:
        raise ValueError(f"a cost of {cost} does not fit a bucket of {rate.burst}")


class MemoryLimits:
    """`LimitStore` in this process's memory (one process: SQLite, or tests), at most
    `max_keys` buckets per limit name, least recently charged forgotten first."""

    def __init__(self, max_keys: int = MAX_KEYS) -> None:
        self._max = max_keys
        self._buckets: dict[str, OrderedDict[str, TokenBucket]] = {}

    def _bucket(self, name: str, key: str, rate: Rate) -> TokenBucket:
        named = self._buckets.setdefault(name, OrderedDict())
        bucket = named.pop(key, None) or TokenBucket(rate.burst, rate.per_ms)
        named[key] = bucket
        while len(named) > self._max:
            named.popitem(last=False)
        return bucket

    async def take(self, name: str, key: str, rate: Rate, now_ms: int, cost: float = 1.0) -> bool:
        """See `LimitStore.take`."""
        _check(rate, cost)
        return self._bucket(name, key, rate).try_take(now_ms, cost)

    async def give(self, name: str, key: str, rate: Rate, now_ms: int, cost: float = 1.0) -> None:
        """See `LimitStore.give`."""
        _check(rate, cost)
        bucket = self._bucket(name, key, rate)
        if bucket.tokens(now_ms) + cost >= rate.burst:
            del self._buckets[name][key]  # full: the same as a bucket never charged
        else:
            bucket.charge(now_ms, -cost)

    def keys(self, name: str) -> int:
        """How many buckets of `name` are kept."""
        return len(self._buckets.get(name, ()))


_REFILLED = "LEAST(%(burst)s, l.level + GREATEST(0, %(now)s - l.at_ms) * %(per_ms)s)"
"""The tokens of the stored bucket `l` at `now`: `TokenBucket._refill`'s formula."""
_CHARGE = f"""
INSERT INTO oauth_limits AS l (name, key, level, at_ms, full_at_ms)
VALUES (%(name)s, %(key)s, %(fresh)s, %(now)s,
        %(now)s + CEIL((%(burst)s - %(fresh)s) / %(per_ms)s)::BIGINT)
ON CONFLICT (name, key) DO UPDATE SET
    level = LEAST(%(burst)s, {_REFILLED} - %(cost)s),
    at_ms = GREATEST(l.at_ms, %(now)s),
    full_at_ms = GREATEST(l.at_ms, %(now)s)
        + CEIL((%(burst)s - LEAST(%(burst)s, {_REFILLED} - %(cost)s)) / %(per_ms)s)::BIGINT
WHERE {_REFILLED} - %(cost)s >= -{EPSILON}
RETURNING l.level
"""
"""One statement: a bucket not seen starts full less `cost`; a stored one is refilled to `now`
and charged `cost` only if that leaves it at 0 or more (a give is a negative cost, always
taken). No row comes back when the take is refused, and the row is then left as it was. The
row lock of the `ON CONFLICT` update makes instances charging one bucket at once take turns."""
_PURGE = "DELETE FROM oauth_limits WHERE full_at_ms <= %(now)s"
_CAP = """
DELETE FROM oauth_limits WHERE name = %(name)s AND key IN (
    SELECT key FROM oauth_limits WHERE name = %(name)s ORDER BY at_ms DESC, key OFFSET %(max)s)
"""


class PgLimits:
    """`LimitStore` on PostgreSQL's `oauth_limits`, shared by every instance on the database.

    Rows of full buckets are deleted (a full bucket is no row), and each limit name keeps at
    most `max_keys` rows (the least recently charged go first): an instance does both at most
    every `PURGE_EVERY_MS`, so a flood of new addresses cannot grow the table without bound.
    """

    def __init__(self, store: PgStore, max_keys: int = MAX_KEYS) -> None:
        self._store = store
        self._max = max_keys
        self._purged_ms: int | None = None
        self._names: set[str] = set()

    async def _charge(self, name: str, key: str, rate: Rate, now_ms: int, cost: float) -> bool:
        import psycopg  # loaded already: this is a PgStore's

        from .postgres import first_line

        args: dict[str, Any] = {
            "name": name,
            "key": key,
            "burst": float(rate.burst),
            "per_ms": float(rate.per_ms),
            "now": int(now_ms),
            "cost": float(cost),
            "fresh": float(min(rate.burst, rate.burst - cost)),
        }
        self._names.add(name)
        due = self._purged_ms is None or now_ms - self._purged_ms >= PURGE_EVERY_MS
        names = sorted(self._names) if due else []

        def work(db: Any) -> bool:
            taken = db.execute(_CHARGE, args).fetchone() is not None
            if due:
                try:  # the charge stands whatever happens to the purge
                    db.execute(_PURGE, {"now": int(now_ms)})
                    for each in names:
                        db.execute(_CAP, {"name": each, "max": self._max})
                except psycopg.Error as exc:
                    log.warning("full limit buckets were not deleted: %s", first_line(exc))
            return taken

        # not tried twice: a charge that committed before the connection broke would count twice
        taken = await self._store.query(work, idempotent=False)
        if due:
            self._purged_ms = now_ms
        return bool(taken)

    async def take(self, name: str, key: str, rate: Rate, now_ms: int, cost: float = 1.0) -> bool:
        """See `LimitStore.take`: one `INSERT ... ON CONFLICT DO UPDATE ... WHERE` statement."""
        _check(rate, cost)
        return await self._charge(name, key, rate, now_ms, cost)

    async def give(self, name: str, key: str, rate: Rate, now_ms: int, cost: float = 1.0) -> None:
        """See `LimitStore.give`: the same statement with a negative cost."""
        _check(rate, cost)
        await self._charge(name, key, rate, now_ms, -cost)


def limit_store(store: object) -> LimitStore:
    """The buckets for a bridge on `store`: `PgLimits` on a `PgStore` (shared by the
    cluster), else `MemoryLimits` (one process: SQLite, or a test's stand-in)."""
    postgres = sys.modules.get("ftwbridge.store.postgres")  # not loaded: not a PgStore
    if postgres is not None and isinstance(store, postgres.PgStore):
        return PgLimits(store)
    return MemoryLimits()
