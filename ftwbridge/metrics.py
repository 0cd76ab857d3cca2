"""Prometheus metrics and the admin listener's app (`/metrics`, `/healthz`, `/readyz`).

One `Metrics` per bridge, on its own registry (never the global one). Counters and histograms
are observed as things happen; the gauges of the pool, the door, the keys part and the
listeners' connections, and the counters those parts keep anyway (sessions ended, pacing
refusals, door drops and refusals), are read at scrape time. A value that only grows is a
Prometheus counter, exposed with the `_total` suffix (OpenMetrics, "Counter"); a value that
goes up and down is a gauge.
"""

from __future__ import annotations

import platform
from collections.abc import Awaitable, Callable, Iterator

import prometheus_client
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    Info,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from quart import Response
from quart_trio import QuartTrio

from ftwbridge import __version__
from ftwbridge.door import Door
from ftwbridge.edge import Connections
from ftwbridge.framing import framing_and_coding, plain_http_errors
from ftwbridge.keys import KeysPort
from ftwbridge.pool import Pool
from ftwbridge.pool.feed import feed_metrics
from ftwbridge.readiness import Verdict
from ftwbridge.status import Status

STATUS_HEADERS = {
    "content-type": "text/html; charset=utf-8",
    "cache-control": "no-store",
    "content-security-policy": "default-src 'none'; style-src 'unsafe-inline'",
    "x-content-type-options": "nosniff",
}

prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]
"""No `<counter>_created` series: they double the lines of every labelled counter and
histogram and no dashboard here reads them (prometheus_client's own switch)."""

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25)


class _Gauges(Collector):
    def __init__(self, pool: Pool, door: Door, keys: KeysPort) -> None:
        self._pool = pool
        self._door = door
        self._keys = keys

    def collect(self) -> Iterator[Metric]:
        yield from self._pool_families()
        yield from self._door_families()
        yield GaugeMetricFamily(
            "ftwbridge_keys_handshakes_pending",
            "Keys-part handshakes begun and neither finished nor aborted",
            value=self._keys.pending_handshakes,
        )

    def _pool_families(self) -> Iterator[Metric]:
        s = self._pool.statistics()
        sessions = GaugeMetricFamily(
            "ftwbridge_sessions", "Agent sessions by state", labels=["state"]
        )
        sessions.add_metric(["ready"], s.sessions - s.busy)
        sessions.add_metric(["busy"], s.busy)
        sessions.add_metric(["opening"], s.opening)
        yield sessions
        yield GaugeMetricFamily(
            "ftwbridge_calls_in_flight", "Box calls in flight", value=s.calls_in_flight
        )
        yield GaugeMetricFamily(
            "ftwbridge_calls_queued", "Calls waiting per process", value=s.queued
        )
        ended = CounterMetricFamily(
            "ftwbridge_sessions_ended", "Sessions ended, by reason", labels=["reason"]
        )
        for reason, n in sorted(s.drops.items()):
            ended.add_metric([reason], n)
        yield ended
        yield from feed_metrics(self._pool.feeds.stats)
        yield CounterMetricFamily(
            "ftwbridge_pacing_refusals",
            "Calls refused by per-home pacing",
            value=self._pool.pacer.refusals,
        )

    def _door_families(self) -> Iterator[Metric]:
        stats = self._door.stats
        drops = CounterMetricFamily(
            "ftwbridge_door_dropped_tun",
            "Tun messages the door dropped past a home's limit",
            labels=["direction"],
        )
        drops.add_metric(["to_box"], stats.dropped_to_box)
        drops.add_metric(["from_box"], stats.dropped_from_box)
        yield drops
        refused = CounterMetricFamily(
            "ftwbridge_door_uplinks_refused",
            "Uplinks the door refused before they were up, by reason"
            " (unknown_home, bad_signature, no_hello, strangers)",
            labels=["reason"],
        )
        for reason, n in sorted(stats.uplinks_refused_by.items()):
            refused.add_metric([reason], n)
        yield refused
        rosters = CounterMetricFamily(
            "ftwbridge_door_rosters_refused",
            "Rosters the door refused, by code (stale_seq, bad_signature, malformed, ...)",
            labels=["code"],
        )
        for code, n in sorted(stats.rosters_refused_by.items()):
            rosters.add_metric([code], n)
        yield rosters
        yield CounterMetricFamily(
            "ftwbridge_door_takeovers",
            "Uplinks closed 4409 because a newer one of the same home took over",
            value=stats.takeovers,
        )
        yield CounterMetricFamily(
            "ftwbridge_door_home_key_changes",
            "Home keys the running bridge saw re-enrolled (its uplink closed, the new key used)",
            value=stats.home_key_changes,
        )
        yield GaugeMetricFamily(
            "ftwbridge_door_rosters_behind",
            "Homes whose box sent an older roster than the bridge holds (it lost its roster)",
            value=self._door.rosters_behind_count,
        )
        yield GaugeMetricFamily(
            "ftwbridge_uplinks", "Boxes connected", value=self._door.uplink_count
        )
        yield GaugeMetricFamily(
            "ftwbridge_door_tunnels",
            "Tunnels open at the door, across every uplink",
            value=self._door.tunnel_count,
        )


class _Listeners(Collector):
    def __init__(self) -> None:
        self.listeners: dict[str, Connections] = {}

    def collect(self) -> Iterator[Metric]:
        away = CounterMetricFamily(
            "ftwbridge_strangers_turned_away",
            "Connections that sent no whole request, closed by a listener's quota of strangers"
            " (how: refused on arrival, or shed for a lighter address)",
            labels=["listener", "how"],
        )
        for name, connections in self.listeners.items():
            for how, n in sorted(connections.turned_away.items()):
                away.add_metric([name, how], n)
        yield away
        family = GaugeMetricFamily(
            "ftwbridge_connections",
            "Open connections by listener (main, admin, door) and state"
            " (idle, request, http2, websocket, closing)",
            labels=["listener", "state"],
        )
        for name, connections in self.listeners.items():
            for state, n in connections.by_state().items():
                family.add_metric([name, state.value], n)
        yield family


class Metrics:
    """The bridge's metrics (names start `ftwbridge_`; durations in seconds)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        ProcessCollector(registry=self.registry)  # process_cpu_seconds_total, _resident_memory
        PlatformCollector(registry=self.registry)  # python_info
        GCCollector(registry=self.registry)  # python_gc_*
        Info("ftwbridge_build", "The bridge's version and runtime", registry=self.registry).info(
            {"version": __version__, "python": platform.python_version()}
        )
        self._call_metrics()
        self._edge_metrics()
        self._state_disk: Gauge | None = None
        self._call_children: dict[tuple[str, str], tuple[Counter, Histogram]] = {}
        self._request_children: dict[tuple[str, str], Counter] = {}
        self._open_children: dict[str, Counter] = {}
        """Each label set's series, kept: prometheus_client's `labels()` validates and locks on
        every call (about 7 us of a call's CPU for the two per call)."""

    def _call_metrics(self) -> None:
        """Tool calls, queue waits and session openings."""
        self.calls = Counter(
            "ftwbridge_tool_calls",
            "Tool calls by tool and outcome (ok or a registry code)",
            ["tool", "outcome"],
            registry=self.registry,
        )
        self.call_seconds = Histogram(
            "ftwbridge_tool_call_seconds",
            "Tool call duration",
            ["tool"],
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.queue_seconds = Histogram(
            "ftwbridge_queue_wait_seconds",
            "Time a call waited for pacing and its session",
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.handshakes = Counter(
            "ftwbridge_handshakes",
            "Session openings by outcome",
            ["outcome"],
            registry=self.registry,
        )
        self.handshake_seconds = Histogram(
            "ftwbridge_handshake_seconds",
            "Handshake to hello_ok",
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )

    def _edge_metrics(self) -> None:
        """The listeners, `/mcp`'s requests, connection faults, the mesh and sign-ins."""
        self._listeners = _Listeners()
        self.registry.register(self._listeners)
        self.requests = Counter(
            "ftwbridge_mcp_requests",
            "Requests that reached /mcp, by JSON-RPC method (known ones, else other or -)"
            " and outcome (ok, a refusal's word, or a box's registry code)",
            ["method", "outcome"],
            registry=self.registry,
        )
        self.connection_faults = Counter(
            "ftwbridge_connection_faults",
            "Connections ended by a fault of their own (kind: http, websocket, http2, door)",
            ["kind"],
            registry=self.registry,
        )

        self.mesh_refused = Counter(
            "ftwbridge_mesh_refused",
            "Forwarded requests the internal listener refused (reason: unsigned, forged,"
            " misaddressed, stale, replayed, busy)",
            ["reason"],
            registry=self.registry,
        )

        self.signin = Counter(
            "ftwbridge_signin_steps",
            "Sign-in steps by step (register, consent, claim, home, exchange, refresh, revoke)"
            " and outcome (ok, asked, approved, denied, unknown, wrong_code, rate_limited,"
            " unavailable, or the RFC 6749 error code)",
            ["step", "outcome"],
            registry=self.registry,
        )

    def on_mesh_refused(self, reason: str) -> None:
        """Count one request the internal listener refused (`ftwbridge.mesh.calls`, `ftwbridge.mesh.relay`)."""
        self.mesh_refused.labels(reason).inc()

    def on_signin(self, step: str, outcome: str) -> None:
        """Count one sign-in step (`ftwbridge.oauth.audit.SignInAudit`)."""
        self.signin.labels(step, outcome).inc()

    def on_connection_fault(self, kind: str) -> None:
        """Count one connection ended by its own fault (`ftwbridge.edge`, the door's 4400)."""
        self.connection_faults.labels(kind).inc()

    def watch(self, pool: Pool, door: Door, keys: KeysPort) -> None:
        """Add the gauges of the pool, the door and the keys part (read at scrape time)."""
        self.registry.register(_Gauges(pool, door, keys))

    def listener(self, name: str) -> Connections:
        """The open connections of listener `name` (`main`, `admin`, `door`): give the result
        to its `EdgeConfig.connections` (the door's own listener: `DoorListener`);
        `ftwbridge_connections{listener=name}` reads it."""
        connections = self._listeners.listeners.setdefault(name, Connections())
        return connections

    def on_call(self, tool: str, outcome: str, seconds: float) -> None:
        """Record one tool call."""
        key = (tool, outcome)
        children = self._call_children.get(key)
        if children is None:  # at most tools x outcomes entries, as the series themselves
            children = (self.calls.labels(tool, outcome), self.call_seconds.labels(tool))
            self._call_children[key] = children
        children[0].inc()
        children[1].observe(seconds)

    def on_request(self, method: str, outcome: str) -> None:
        """Record one request that reached `/mcp` (`McpService`'s `on_request`): its JSON-RPC
        `method` (a bounded set) and its `outcome`."""
        key = (method, outcome)
        child = self._request_children.get(key)
        if child is None:
            child = self._request_children[key] = self.requests.labels(method, outcome)
        child.inc()

    def watch_state_disk(self, free_bytes: Callable[[], float]) -> None:
        """Export `ftwbridge_state_disk_free_bytes`, read from `free_bytes` at each scrape
        (an embedded bridge's state folder: `StateWatch.free_bytes`); a second call (the
        bridge served again) reads the new function."""
        if self._state_disk is None:
            self._state_disk = Gauge(
                "ftwbridge_state_disk_free_bytes",
                "Bytes free to the bridge's user on the disk holding the state folder"
                " (embedded store; below 1 MiB /readyz says the disk is full)",
                registry=self.registry,
            )
        self._state_disk.set_function(free_bytes)

    def on_queue_wait(self, seconds: float) -> None:
        """Record how long a call waited before reaching its session."""
        self.queue_seconds.observe(seconds)

    def on_open(self, outcome: str, seconds: float) -> None:
        """Record one session opening (`ok` or the refusal's code)."""
        child = self._open_children.get(outcome)
        if child is None:  # outcomes are `ok`, `closed` and the registry's codes: bounded
            child = self._open_children[outcome] = self.handshakes.labels(outcome)
        child.inc()
        if outcome == "ok":
            self.handshake_seconds.observe(seconds)

    def text(self) -> bytes:
        """The Prometheus text exposition."""
        return generate_latest(self.registry)


def create_admin_app(
    metrics: Metrics,
    readiness: Callable[[], Awaitable[Verdict]],
    status: Status | None = None,
) -> QuartTrio:
    """The admin listener's app: `/metrics`, `/healthz` (alive), `/readyz` (200 `ready` or
    `ready, degraded: <why>`, or 503 `not ready: <why>`, as `readiness()` judges:
    `ftwbridge/readiness.py`), and with `status` the read-only status page at `/`
    (ftwbridge/status.py)."""
    app = QuartTrio("ftwbridge-admin")
    app.before_request(framing_and_coding)
    plain_http_errors(
        app, "/metrics, /healthz, /readyz" + (" and the status page at /" if status else "")
    )

    if status is not None:
        shown = status

        @app.route("/")
        async def status_page() -> Response:
            verdict = await readiness()
            why = verdict.why
            body = shown.page(None if verdict.ready else why, why if verdict.ready else None)
            return Response(body, 200, STATUS_HEADERS)

    @app.route("/metrics")
    async def metrics_route() -> Response:
        return Response(metrics.text(), 200, {"content-type": "text/plain; version=0.0.4"})

    @app.route("/healthz")
    async def healthz() -> Response:
        return Response(b"ok\n", 200, {"content-type": "text/plain"})

    @app.route("/readyz")
    async def readyz() -> Response:
        verdict = await readiness()
        body = f"{verdict.text()}\n".encode()
        status = 200 if verdict.ready else 503
        return Response(body, status, {"content-type": "text/plain; charset=utf-8"})

    return app


__all__ = ["Metrics", "create_admin_app"]
