"""`subscriptions/listen` at `/mcp` (MCP 2026-07-28, SEP-2575; PROTOCOL.md parts D and F;
docs/live.md): the answer is a `text/event-stream` that lives while the client keeps it.

`Listens.open(route, token, headers)` refuses what it must with an ordinary JSON error before
the stream opens (no `text/event-stream` in `Accept`: 406; a bad filter: -32602; past the
bounds: 429 per agent or 503 per process, both with `Retry-After`; a drain under way: 503;
on many instances, a home whose uplink is not here: 503 in words; one another instance holds
is forwarded there before it reaches this module, `mesh/forward.py`). Otherwise it returns an `HttpResponse` whose
`stream` writes the events: the acknowledgement first, before any box I/O (the feed's
reference is taken just after it; nothing is lost, since a new reference to a feed that is
already whole starts dirty, and one that starts hears its first snap); then
`notifications/resources/updated` for the home's `live` URI as `listen_rules.UpdatePacer`
allows, from the pool's live feed (`pool/feed.py`), never a box read per update; a keep-alive
comment every `listen_keepalive_s` of quiet.

How a stream ends: the client's close is its cancellation (the HTTP shell cancels the stream;
the reference is dropped and nothing more is sent); a token that expires, or a grant the
owner withdrew or that ran out, ends the stream without a result, so the client listens again
and meets the 401; a drain ends every stream with the graceful result; a lost uplink (or any
other end of the feed's session) keeps the stream: the client hears one update (the home is
stale: a read now fails in words) and the feed is started again, after 1, 2, 4 ... at most
`RETRY_MAX_S` seconds, until the home is back. On many instances, a feed that ends while the
home's uplink is no longer here (a takeover by another instance, or the home offline) ends the
stream without a result instead: the client listens again, where the home is.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import trio
from mcp_types import jsonrpc
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ftwbridge.config import Config
from ftwbridge.pool.feed import Watch
from ftwbridge.proto.names import TunEndReason
from ftwbridge.store import TokenRecord

from . import listen_rules as rules
from .inbound import Rejection, Route
from .server import HttpResponse, Write

log = logging.getLogger("ftwbridge.mcp.listen")

RETRY_MAX_S = 15.0
"""The longest a stream whose home went away waits before it tries its feed again, seconds."""
BUSY_RETRY_S = 5
"""`Retry-After` of a listen refused for a bound, seconds."""
GRANT_ENDS = frozenset({TunEndReason.REVOKED.value, TunEndReason.EXPIRED.value})
"""Feed ends that mean the grant is gone: the stream ends without a result."""
SSE_HEADERS = {
    "content-type": "text/event-stream",
    "cache-control": "no-cache, no-transform",
    "x-accel-buffering": "no",
}
"""A stream's headers; `X-Accel-Buffering: no` asks nginx-style proxies not to buffer it."""


class FeedsPort(Protocol):
    """What a stream needs of the pool's live feeds (`pool.feed.Feeds` fits)."""

    def watch(self, home: str, agent_key: bytes) -> contextlib.AbstractAsyncContextManager[Watch]:
        """A counted reference to the (home, agent) feed."""


def _json(status: int, value: Any, headers: dict[str, str] | None = None) -> HttpResponse:
    body = json.dumps(value, separators=(",", ":")).encode()
    return HttpResponse(status, {"content-type": "application/json", **(headers or {})}, body)


def accepts_event_stream(values: list[str]) -> bool:
    """Whether an `Accept` header allows `text/event-stream` (RFC 9110 section 12.5.1)."""
    for part in ",".join(values).split(","):
        media = part.split(";")[0].strip().lower()
        if media in ("text/event-stream", "text/*", "*/*"):
            return True
    return False


class Listens:
    """Every listen stream of one bridge process, and their bounds.

    Args:
        feeds: the pool's live feeds.
        config: `listen_min_interval_s`, `listen_keepalive_s`, `listen_per_agent`,
            `listen_streams`.
        wall_ms: the bridge's wall clock (ms since the epoch): a token's end is judged by it.
        held_elsewhere: home -> True when another instance holds its uplink (then refused);
            None for a single instance.
    """

    def __init__(
        self,
        *,
        feeds: FeedsPort,
        config: Config,
        wall_ms: Callable[[], int],
        held_elsewhere: Callable[[str], Awaitable[bool]] | None = None,
    ) -> None:
        self._feeds = feeds
        self._config = config
        self._wall_ms = wall_ms
        self._held_elsewhere = held_elsewhere
        self._per_agent: dict[tuple[str, bytes], int] = {}
        self.open_streams = 0
        self.updates_sent = 0
        self._drain = trio.Event()
        self._streams: set[_Stream] = set()
        self._ended = trio.Event()
        """Set (and replaced) each time a stream ends."""

    async def wait_streams_at_most(self, n: int) -> None:
        """Return once at most `n` streams are open (the caller bounds the time)."""
        while self.open_streams > n:
            await self._ended.wait()

    def drain(self) -> None:
        """End every stream with the graceful result, and refuse new ones (503)."""
        self._drain.set()
        for s in self._streams:
            if s.waiting is not None:
                s.waiting.cancel()

    async def open(
        self, route: Route, token: TokenRecord, headers: dict[str, list[str]]
    ) -> HttpResponse:
        """Answer one `subscriptions/listen` (see the module docstring for the refusals)."""
        rid = route.id
        assert rid is not None
        if not accepts_event_stream(headers.get("accept", [])):
            rej = Rejection(
                406, jsonrpc.INVALID_REQUEST, "Accept must allow text/event-stream", route.id
            )
            return _json(406, rej.body())
        filt = rules.honored(route.params, rid, home=token.home, scopes=token.scopes)
        if isinstance(filt, Rejection):
            return _json(filt.status, filt.body())
        busy = self._refusal(rid, token)
        elsewhere = self._held_elsewhere
        if busy is None and elsewhere is not None and await elsewhere(token.home):
            words = (
                "this home's uplink is not at this bridge instance (another instance holds it,"
                " or the home is offline), and listen streams are served only where it is;"
                " listen again in a few seconds (a proxy that routes by home helps)"
            )
            busy = _json(503, Rejection(503, -32603, words, rid).body(), _retry())
        if busy is not None:
            return busy
        key = (token.home, token.agent_key)
        self._per_agent[key] = self._per_agent.get(key, 0) + 1
        self.open_streams += 1

        async def stream(write: Write) -> None:
            try:
                await self._serve(rid, token, filt, write)
            finally:
                self.open_streams -= 1
                self._ended.set()
                self._ended = trio.Event()
                left = self._per_agent[key] - 1
                if left:
                    self._per_agent[key] = left
                else:
                    del self._per_agent[key]

        return HttpResponse(200, dict(SSE_HEADERS), stream=stream)

    def _refusal(self, rid: str | int, token: TokenRecord) -> HttpResponse | None:
        if self._drain.is_set():
            words = "the bridge is restarting; listen again in a few seconds"
            return _json(503, Rejection(503, -32603, words, rid).body(), _retry())
        per_agent = self._config.listen_per_agent
        if self._per_agent.get((token.home, token.agent_key), 0) >= per_agent:
            words = f"this agent holds {per_agent} listen streams already; close one first"
            return _json(429, Rejection(429, -32029, words, rid).body(), _retry())
        if self.open_streams >= self._config.listen_streams:
            words = "this bridge serves as many listen streams as it can; try again shortly"
            return _json(503, Rejection(503, -32603, words, rid).body(), _retry())
        return None

    async def _serve(
        self, rid: str | int, token: TokenRecord, filt: dict[str, Any], write: Write
    ) -> None:
        """Write one stream until it ends (module docstring)."""
        uris: list[str] = filt.get("resourceSubscriptions") or []
        left_s = (token.expires_at_ms - self._wall_ms()) / 1000
        s = _Stream(rid, uris, write, rules.UpdatePacer(self._config.listen_min_interval_s))
        s.keepalive_at = trio.current_time() + self._config.listen_keepalive_s
        retry_s = 1.0
        self._streams.add(s)
        with _discarding(self._streams, s), trio.move_on_after(max(0.0, left_s)):
            # The ack goes first, before any box I/O; nothing is lost by taking the feed's
            # reference after it: a new `Watch` of a feed already whole starts dirty.
            await write(rules.ack(rid, filt))
            while True:  # the token's end cancels: no result
                async with self._watch(token, bool(uris)) as w:
                    end = await self._loop(s, w, math.inf)
                elsewhere = self._held_elsewhere
                if end == "lost" and elsewhere is not None and await elsewhere(token.home):
                    return  # taken over by another instance: ended, the client listens again
                if end == "lost":  # the home is stale: say so, keep the stream, try again
                    s.pacer.changed(trio.current_time(), notable=True)
                    end = await self._loop(s, None, trio.current_time() + retry_s)
                    retry_s = min(RETRY_MAX_S, retry_s * 2)
                if end == "drain":
                    await write(rules.graceful_end(rid))
                    return
                if end == "grant":
                    return

    @contextlib.asynccontextmanager
    async def _watch(self, token: TokenRecord, wanted: bool) -> AsyncIterator[Watch | None]:
        """A reference to the agent's feed for the block, or None when no URI is honoured."""
        if not wanted:
            yield None
            return
        async with self._feeds.watch(token.home, token.agent_key) as w:
            yield w

    async def _loop(self, s: _Stream, w: Watch | None, until: float) -> str:
        """Send updates and keep-alives until `until` (trio seconds; `retry`), a drain
        (`drain`), or the feed's end: `grant` when the grant is gone, else `lost`."""
        keepalive_s = self._config.listen_keepalive_s
        while not self._drain.is_set():
            now = trio.current_time()
            if w is not None and w.ended.is_set():
                return "grant" if w.end_reason in GRANT_ENDS else "lost"
            if w is not None and w.changed.is_set():
                s.pacer.changed(now, notable=w.take())
            due = s.pacer.due_at()
            if due is not None and due <= now:
                for uri in s.uris:
                    await s.write(rules.updated(s.rid, uri))
                    self.updates_sent += 1
                s.pacer.sent(now)
                s.keepalive_at = now + keepalive_s
            elif now >= s.keepalive_at:
                await s.write(rules.KEEP_ALIVE)
                s.keepalive_at = now + keepalive_s
            elif now >= until:
                return "retry"
            else:
                wake_at = min(s.keepalive_at, until, math.inf if due is None else due)
                with trio.move_on_at(wake_at) as s.waiting:  # `drain` cancels it
                    if w is None:
                        await trio.sleep_forever()
                    else:
                        await w.changed.wait()
                s.waiting = None
        return "drain"


class ListenMetrics(Collector):
    """Prometheus families of `listens`, read at scrape time: `ftwbridge_listen_streams`
    (open now) and `ftwbridge_listen_updates_total` (`resources/updated` sent)."""

    def __init__(self, listens: Listens) -> None:
        self._listens = listens

    def collect(self) -> Iterator[Metric]:
        """The two families."""
        yield GaugeMetricFamily(
            "ftwbridge_listen_streams", "Listen streams open", value=self._listens.open_streams
        )
        yield CounterMetricFamily(
            "ftwbridge_listen_updates",
            "resources/updated notifications sent on listen streams",
            value=self._listens.updates_sent,
        )


@dataclass(slots=True, eq=False)
class _Stream:
    """One stream's own state: its id, honoured URIs, writer, pacer and next keep-alive."""

    rid: str | int
    uris: list[str]
    write: Write
    pacer: rules.UpdatePacer
    keepalive_at: float = 0.0
    waiting: trio.CancelScope | None = None
    """The scope of the stream's wait, while it waits (a drain cancels it)."""


@contextlib.contextmanager
def _discarding(streams: set[_Stream], s: _Stream) -> Iterator[None]:
    try:
        yield
    finally:
        streams.discard(s)


def _retry() -> dict[str, str]:
    return {"retry-after": str(BUSY_RETRY_S)}
