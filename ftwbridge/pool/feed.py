"""Live feeds: one telemetry subscription per (home, agent), shared by counted references
(PROTOCOL.md part F; docs/live.md).

`Feeds.watch(home, agent_key)` is an async context manager that yields a `Watch`: the first
reference starts the feed (a task in the pool's nursery takes the agent's warm session through
`Pool.hold`, sends `sub` on it with an id of its own, and lets the session go at once: the
`sub` never holds the session's one request in flight, and reads and commands go on beside the
stream). The box's frames come from the uplink's reader through `PooledSession.push_sink` into
`Feed.on_push`, which updates the feed's `LiveMirror` (no I/O, no box read) and marks each
`Watch` dirty. A `seq` gap, or a truncated delta, asks the feed's task for one `live.get` on
the same session (`Pool.call`), the only box read a feed makes, counted in `FeedStats`.

While referenced, a feed keeps its session from the pool's idle close (`Feeds.referenced`).
There is no unsubscribe upstream, so a feed whose last reference went stays subscribed until
its session closes in the ordinary way; a new reference in the meantime finds it running. A feed
ends with its session, whatever ended it (revocation, expiry, takeover, drain, the box's
`session.terminate`, a lost uplink) and every `Watch` learns why (`Watch.end_reason`).
"""

from __future__ import annotations

import contextlib
import enum
import logging
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import trio
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from ftwbridge.proto.frame import DEFAULT_CONTROL_BUCKET
from ftwbridge.proto.names import Code, Read, TunEndReason
from ftwbridge.proto.refusal import Refusal
from ftwbridge.proto.registry import Msg, peer_code
from ftwbridge.proto.session import Push
from ftwbridge.proto.telemetry import LiveMirror, Moved, NeedsResync, TelemetryMsg, pulse_period_s

from .homes import SessionHolder
from .session import PooledSession

log = logging.getLogger("ftwbridge.pool.feed")

STALE_PULSES = 3
"""A feed's picture is fresh while its newest frame is at most this many pulses old (plus 1 s)."""


class FeedState(enum.Enum):
    """STARTING (the `sub` is out, no snap yet), LIVE, or ENDED (with its session)."""

    STARTING = "starting"
    LIVE = "live"
    ENDED = "ended"


@dataclass(slots=True)
class FeedStats:
    """What feeds counted: frames applied (`updates`), box reads made (`box_reads`: the resyncs;
    never one per update), resyncs by why (`gap`, `truncated`), feeds started and running."""

    updates: int = 0
    box_reads: int = 0
    started: int = 0
    running: int = 0
    resyncs: dict[str, int] = field(default_factory=dict)


@dataclass(slots=True, eq=False)
class Watch:
    """One reference to a feed: a small dirty flag, never a backlog of frames.

    `changed` is set when the picture moved since the holder last called `take`, and when
    the feed ended (so a holder waits on one event); `notable`
    says whether a source's state, the mode or a dispatch block moved among those changes.
    `ended` is set when the feed ended; `end_reason` says why (a `tun.end` reason, a local end
    such as `uplink_lost`, or a refusal's code when the feed could not start).
    """

    feed: Feed
    changed: trio.Event = field(default_factory=trio.Event)
    notable: bool = False
    ended: trio.Event = field(default_factory=trio.Event)
    end_reason: str | None = None

    def take(self) -> bool:
        """Clear the dirty flag; returns whether a notable change was among those taken."""
        notable, self.notable = self.notable, False
        self.changed = trio.Event()
        return notable

    def view(self) -> dict[str, Any] | None:
        """The feed's `live` answer when its picture is complete, else None."""
        return self.feed.view() if self.feed.complete else None


class Feed:
    """One (home, agent) subscription and its rebuilt `live` answer.

    Times are trio's clock (seconds). `hz` is the subscription's rate (agents.yaml
    `telemetry_hz`).
    """

    def __init__(self, home: str, agent_key: bytes, *, hz: float, stats: FeedStats) -> None:
        self.home = home
        self.agent_key = agent_key
        self.hz = hz
        self.state = FeedState.STARTING
        self.session: PooledSession | None = None
        self.mirror = LiveMirror()
        self.watches: set[Watch] = set()
        self.end_reason: str | None = None
        self.last_frame_at = float("-inf")
        self.resync_wanted = trio.Event()
        self.resyncing = False
        """A resync is asked for or under way: frames meanwhile ask for no other."""
        self.started = trio.Event()
        self.scope = trio.CancelScope()
        self._stats = stats

    @property
    def complete(self) -> bool:
        """LIVE with a picture that needs no resync."""
        return self.state is FeedState.LIVE and self.mirror.complete

    def fresh(self, now: float) -> bool:
        """`complete` and its newest frame at most `STALE_PULSES` pulses old at `now`."""
        age = now - self.last_frame_at
        return self.complete and age <= STALE_PULSES * pulse_period_s(self.hz) + 1

    def view(self) -> dict[str, Any]:
        """The rebuilt `live` answer (PROTOCOL.md part B), a copy."""
        return self.mirror.view()

    def on_push(self, ev: Push) -> None:
        """A message with no call from the feed's session (`PooledSession.push_sink`), in the
        uplink reader's task: a `snap`, `tick` or `delta` moves the picture; an `error` on the
        `sub`'s id ends the feed with its code; anything else is not the feed's."""
        if self.state is FeedState.ENDED:
            return
        if ev.answers_sub and ev.t == Msg.ERROR:
            body = ev.body if isinstance(ev.body, dict) else {}
            self.end(peer_code(body.get("code")))
            return
        if ev.t == TelemetryMsg.SNAP:
            moved = self.mirror.snap(ev.body)
            if self.state is FeedState.STARTING:
                self.state = FeedState.LIVE
                self.started.set()
        elif ev.t in (TelemetryMsg.TICK, TelemetryMsg.DELTA):
            try:
                moved = self.mirror.pulse(ev.t, ev.body, truncated=ev.truncated)
            except NeedsResync as exc:
                if not self.resyncing:  # one live.get makes it whole, whatever came meanwhile
                    self.resyncing = True
                    self._stats.resyncs[exc.why] = self._stats.resyncs.get(exc.why, 0) + 1
                    self.resync_wanted.set()
                moved = Moved.READINGS
        else:
            return
        self._stats.updates += 1
        self.last_frame_at = trio.current_time()
        self._mark(moved)

    def resynced(self, live: Any) -> None:
        """One `live.get` answer (`Reply.body`) makes the picture whole again."""
        self.resyncing = False
        self._mark(self.mirror.resync(live))

    def _mark(self, moved: Moved) -> None:
        if moved is Moved.NOTHING:
            return
        for w in self.watches:
            w.notable = w.notable or moved is Moved.NOTABLE
            w.changed.set()

    def end(self, reason: str) -> None:
        """End the feed for `reason` (first reason stays) and tell every watch."""
        if self.state is FeedState.ENDED:
            return
        self.state = FeedState.ENDED
        self.end_reason = reason
        self.started.set()
        self.scope.cancel()
        if self.session is not None and self.session.push_sink == self.on_push:
            self.session.push_sink = None
        for w in self.watches:
            w.end_reason = reason
            w.ended.set()
            w.changed.set()  # one event to wait on: a change or the end


class Feeds:
    """Every live feed of one pool, by (home, agent key).

    Args:
        pool: the pool whose sessions carry the feeds (its `hold`, `call` and nursery).
        hz: the rate feeds subscribe at (1 or 0.2, agents.yaml `telemetry_hz`).
        start_s: how long a feed waits for its first `snap` before it ends `no_answer`.
    """

    def __init__(self, pool: SessionHolder, *, hz: float, start_s: float) -> None:
        self._pool = pool
        self._hz = hz
        self._start_s = start_s
        self._feeds: dict[tuple[str, bytes], Feed] = {}
        self._leases: dict[tuple[str, bytes], trio.CancelScope] = {}
        self.stats = FeedStats()

    def referenced(self, s: PooledSession) -> bool:
        """Whether a referenced feed rides on `s` (the pool then skips its idle close)."""
        f = self._feeds.get((s.home, s.agent_key))
        return f is not None and f.session is s and bool(f.watches)

    def live_view(self, home: str, agent_key: bytes) -> dict[str, Any] | None:
        """A fresh `live` answer from a running feed, or None (no feed, not yet whole, or its
        newest frame too old): the caller then reads the box. No I/O."""
        f = self._feeds.get((home, agent_key))
        if f is None or not f.fresh(trio.current_time()):
            return None
        return f.view()

    def lease(self, home: str, agent_key: bytes, seconds: float) -> None:
        """Keep a reference to the (home, agent) feed for `seconds` from now (trio's clock),
        starting the feed if none runs; a later lease moves the end further, never nearer.

        For a reader that polls rather than holds a stream (the MCP Apps view's live tool,
        `mcp/apps.py`): while its polls keep coming the feed stays up and `live_view` answers
        them, so a view left open costs the home its one telemetry stream and no reads. The
        reference is a task in the pool's nursery; it ends at the lease's end or with the feed.
        """
        key = (home, agent_key)
        ends = trio.current_time() + seconds
        scope = self._leases.get(key)
        if scope is not None:
            scope.deadline = max(scope.deadline, ends)
            return
        scope = self._leases[key] = trio.CancelScope(deadline=ends)
        if not self._pool.spawn(self._hold_lease, key, scope):
            del self._leases[key]

    async def _hold_lease(self, key: tuple[str, bytes], scope: trio.CancelScope) -> None:
        try:
            with scope:
                async with self.watch(*key) as w:
                    await w.ended.wait()
        finally:
            if self._leases.get(key) is scope:
                del self._leases[key]

    def session_closed(self, s: PooledSession) -> None:
        """`s` closed: the feed riding on it ends with the session's reason."""
        f = self._feeds.get((s.home, s.agent_key))
        if f is not None and f.session is s:
            f.end(s.end_reason or TunEndReason.CLOSED.value)

    @contextlib.asynccontextmanager
    async def watch(self, home: str, agent_key: bytes) -> AsyncIterator[Watch]:
        """Hold a reference to the (home, agent) feed for the block; starts it if none runs.

        Yields a `Watch` at once (before any box I/O: the feed starts in the pool's nursery;
        wait for `Watch.changed` or `Watch.ended`). Leaving the block drops the reference.
        """
        key = (home, agent_key)
        f = self._feeds.get(key)
        if f is None or f.state is FeedState.ENDED:
            f = self._feeds[key] = Feed(home, agent_key, hz=self._hz, stats=self.stats)
            if not self._pool.spawn(self._run, f):
                f.end(TunEndReason.RESTARTING.value)
        w = Watch(f)
        if f.state is FeedState.ENDED:
            w.end_reason = f.end_reason
            w.ended.set()
            w.changed.set()
        elif f.complete:
            w.changed.set()  # the picture is there already
        f.watches.add(w)
        try:
            yield w
        finally:
            f.watches.discard(w)

    async def _run(self, f: Feed) -> None:
        """A feed's task: start it, then make each resync it asks for, until it ends."""
        self.stats.started += 1
        self.stats.running += 1
        try:
            with f.scope:
                try:
                    await self._start(f)
                    while True:
                        await f.resync_wanted.wait()
                        f.resync_wanted = trio.Event()
                        await self._resync(f)
                except Refusal as exc:
                    f.end(_reason(exc))
        finally:
            self.stats.running -= 1
            f.end(f.end_reason or TunEndReason.CLOSED.value)
            if self._feeds.get((f.home, f.agent_key)) is f:
                del self._feeds[(f.home, f.agent_key)]

    async def _resync(self, f: Feed) -> None:
        """One `live.get` on the feed's session; a pacing refusal is waited out and asked
        again (the stream is not ended for it).

        Raises:
            Refusal: any other refusal (the feed then ends with it).
        """
        while True:
            try:
                reply = await self._pool.call(f.home, f.agent_key, Read.LIVE_GET.value)
            except Refusal as exc:
                if exc.code != Code.E_RATE_LIMITED:
                    raise
                await trio.sleep((exc.retry_after_ms or 1000) / 1000)
                continue
            self.stats.box_reads += 1
            f.resynced(reply.body)
            return

    async def _start(self, f: Feed) -> None:
        """Send `sub` on the agent's session and wait for the first `snap` (or its refusal).

        Raises:
            Refusal: the session could not be had, or no snap came within `start_s`.
        """
        async with self._pool.hold(f.home, f.agent_key) as (s, _grant):
            if s.agent is None or s.tun is None or s.is_closed:
                raise Refusal(Code.E_UNAVAILABLE, {"reason": "closed"})
            f.mirror.modes = s.agent.modes
            f.session = s
            s.push_sink = f.on_push
            _rid, message = s.agent.subscribe({"bucket": DEFAULT_CONTROL_BUCKET, "hz": f.hz})
            if not await s.tun.send(message):
                raise Refusal(Code.E_RATE_LIMITED, {"retryAfterMs": 1000}, 1000)
        with trio.move_on_after(self._start_s):
            await f.started.wait()
        if f.state is FeedState.STARTING:
            raise Refusal(Code.E_UNAVAILABLE, {"reason": "no_answer"})
        log.info("feed live home=%s", f.home)


def feed_metrics(stats: FeedStats) -> Iterator[Metric]:
    """Prometheus families of `stats`: frames applied against box reads made (the goal is no
    box read per update), feeds running, and resyncs by why."""
    yield CounterMetricFamily(
        "ftwbridge_feed_updates", "Telemetry frames live feeds applied", value=stats.updates
    )
    yield CounterMetricFamily(
        "ftwbridge_feed_box_reads",
        "Box reads live feeds made (resyncs only, never one per update)",
        value=stats.box_reads,
    )
    yield GaugeMetricFamily("ftwbridge_feeds", "Live feeds running", value=stats.running)
    resyncs = CounterMetricFamily(
        "ftwbridge_feed_resyncs", "Live feed resyncs, by why", labels=["why"]
    )
    for why, n in sorted(stats.resyncs.items()):
        resyncs.add_metric([why], n)
    yield resyncs


def _reason(exc: Refusal) -> str:
    """A refusal as a feed's end reason: the session's end for those (revoked, expired), the
    code otherwise."""
    if exc.code == Code.E_GRANT_REVOKED:
        return TunEndReason.REVOKED.value
    if exc.code == Code.E_GRANT_EXPIRED:
        return TunEndReason.EXPIRED.value
    if exc.code == Code.E_UNAVAILABLE and isinstance(exc.details.get("reason"), str):
        return str(exc.details["reason"])
    return str(exc.code)
