"""Live streams: many `subscriptions/listen` streams against one bridge process.

`--streams` streams (default 1,000) over a quarter as many stub homes (250): 4 agents per home,
one stream each, so each stream has its own live feed and each home serves the box's cap of 4
subscribed sessions (agents.yaml `live_sessions`); feeds subscribe at `--hz` (0.2). The bridge
runs in this process (as in bench/sessions.py, through bench/bridge_server.py); the stub homes
run in one stub process and the listening client in another, both pinned to CPU 1 (run.py pins
this process to CPU 0). Each stream is one raw HTTP/1.1 connection that reads its events.
The homes' uptimes are spread over `--stagger` seconds (default 5, one period at 0.2 Hz), so
their pulses are spread as those of homes that booted apart; `--stagger 0`: all at once.

After every session is warm and every stream acknowledged, `--settle` seconds pass (each
stream's first update, from its feed's snap, is not measured), then `--seconds` are measured:

- bridge CPU per update delivered: this process's CPU time over the window (`time.process_time`,
  which the machine's other load moves far less than wall time) over the
  `notifications/resources/updated` events the client read in it;
- RSS per stream: this process's RSS with every stream open, less its RSS with every session
  warm and no feed (so a stream's share includes its feed and its connection); before the
  streams open, the bench itself holds a reference to every feed (`Pool.feeds.watch`), which
  tells the feeds' share (`rss_kib_per_feed`) from the HTTP streams';
- latency: from the moment the bridge applied a telemetry frame that moved the readings
  (`Feed._mark`, in the uplink reader's task, after decryption and decoding: the stub has no hook
  to stamp its send time) to the moment the client read the event, both by the wall clock of this
  machine; each event is matched to the newest such frame of its feed before it; and the same
  from the later of that frame and the moment the stream's interval let the update go
  (`latency_past_interval_ms`: the path alone, without the pacing's wait);
- box reads per update: every `Pool.call` in the window (a feed's resync goes through it, and
  so would any other read) over the updates delivered.

Prints one JSON line at the end. `--client` is the listening side (started by this script).
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import functools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections import defaultdict
from pathlib import Path
from typing import Any

import trio

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
from bridge_server import start, warm  # type: ignore[import-not-found]  # noqa: E402

from ftwbridge.mcp.listen_rules import live_uri  # noqa: E402
from ftwbridge.pool import feed as feed_mod  # noqa: E402

AGENTS = 4
"""Agents per home, one stream each: the box's cap of subscribed sessions per home."""
VERSION = "2026-07-28"
UPDATED = b"notifications/resources/updated"
ACKED = b"notifications/subscriptions/acknowledged"


def rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def listen_request(host: str, rid: int, token: str, home: str) -> bytes:
    """One `subscriptions/listen` for `home`'s live resource as raw HTTP/1.1 bytes."""
    meta = {
        "io.modelcontextprotocol/protocolVersion": VERSION,
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    params = {"notifications": {"resourceSubscriptions": [live_uri(home)]}, "_meta": meta}
    body = {"jsonrpc": "2.0", "id": rid, "method": "subscriptions/listen", "params": params}
    data = json.dumps(body).encode()
    head = (
        f"POST /mcp HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\n"
        "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
        f"MCP-Protocol-Version: {VERSION}\r\nMcp-Method: subscriptions/listen\r\n"
        f"Content-Length: {len(data)}\r\n\r\n"
    )
    return head.encode() + data


# ---- the client process -------------------------------------------------------------------


async def one_stream(
    port: int,
    rid: int,
    token: str,
    home: str,
    events: list[float],
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Hold one stream open, appending the wall time (s) of each update event to `events`;
    started once the stream is acknowledged."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(listen_request(f"127.0.0.1:{port}", rid, token, home))
        tail, seen_ack = b"", False
        while True:
            chunk = await stream.receive_some(65536)
            now = time.time()
            if not chunk:
                raise RuntimeError(f"stream {rid} ended: {tail[-300:]!r}")
            got = tail + chunk
            if not seen_ack and ACKED in got:
                seen_ack = True
                task_status.started()
            # Count markers that end in this chunk only (the tail holds a marker's start).
            start = max(0, len(tail) - len(UPDATED) + 1)
            events.extend(now for _ in range(got.count(UPDATED, start)))
            tail = got[-(len(UPDATED) - 1) :]


async def client(args: argparse.Namespace) -> None:
    """Open every stream (64 at a time), say `open` once all are acknowledged, read until
    stdin closes, then write every stream's event times to `--out`."""
    streams: list[tuple[str, str]] = json.loads(await trio.Path(args.tokens).read_text())
    events: list[list[float]] = [[] for _ in streams]
    limiter = trio.CapacityLimiter(64)
    stdin = trio.lowlevel.FdStream(os.dup(0))
    async with trio.open_nursery() as nursery:

        async def opened(rid: int, token: str, home: str) -> None:
            async with limiter:
                await nursery.start(one_stream, args.port, rid, token, home, events[rid])

        async with trio.open_nursery() as opening:
            for rid, (token, home) in enumerate(streams):
                opening.start_soon(opened, rid, token, home)
        print("open", flush=True)
        while await stdin.receive_some(1024):
            pass
        nursery.cancel_scope.cancel()
    await trio.Path(args.out).write_text(json.dumps(events))


# ---- the bridge process -------------------------------------------------------------------


FRAMES: dict[tuple[str, bytes], list[float]] = defaultdict(list)
"""(home, agent key) -> wall times (s) at which the bridge applied a frame that moved it."""


def record_frames() -> None:
    """Wrap `Feed._mark` to note when each feed applied a frame that moved its picture."""
    original = feed_mod.Feed._mark

    def _mark(self: feed_mod.Feed, moved: Any) -> None:
        if moved is not feed_mod.Moved.NOTHING:
            FRAMES[(self.home, self.agent_key)].append(time.time())
        original(self, moved)

    feed_mod.Feed._mark = _mark  # type: ignore[method-assign]


def latencies_ms(
    events: list[list[float]], keys: list[tuple[str, bytes]], t0: float, t1: float
) -> list[float]:
    """Each event in [t0, t1) less the newest frame its feed applied before it, ms."""
    out = []
    for stream_events, key in zip(events, keys, strict=True):
        frames = FRAMES.get(key, [])
        for te in stream_events:
            if not t0 <= te < t1:
                continue
            i = bisect.bisect_right(frames, te)
            if i:
                out.append(1000 * (te - frames[i - 1]))
    return sorted(out)


def paced_latencies_ms(
    events: list[list[float]],
    keys: list[tuple[str, bytes]],
    t0: float,
    t1: float,
    interval_s: float,
) -> list[float]:
    """Each event in [t0, t1) less the later of the newest frame its feed applied before it
    and the moment the stream's pacing let it go (its previous event's read plus
    `listen_min_interval_s`), ms, at least 0.

    This is the bridge's path without the interval's wait: when the box moves its readings at
    every pulse and pulses at the interval's own period (the bench's 0.2 Hz against 5 s), each
    update waits for the interval by as much as the stream's first update was out of step with
    the pulses, 0 to 5 s, which `latencies_ms` counts in. The previous event is taken as the
    client read it, later than the bridge sent it by that event's own path time, so this figure
    errs low by at most that much.
    """
    out = []
    for stream_events, key in zip(events, keys, strict=True):
        frames = FRAMES.get(key, [])
        for k, te in enumerate(stream_events):
            if not t0 <= te < t1 or k == 0:
                continue
            i = bisect.bisect_right(frames, te)
            if i:
                allowed = max(frames[i - 1], stream_events[k - 1] + interval_s)
                out.append(max(0.0, 1000 * (te - allowed)))
    return sorted(out)


def pct(values: list[float], q: float) -> float | None:
    return None if not values else values[min(len(values) - 1, int(q * len(values)))]


async def open_client(
    nursery: trio.Nursery, port: int, streams: list[tuple[str, str]], tmp: Path, cpu: int | None
) -> tuple[trio.Process, Path]:
    """Start the listening client; returns (process, where it writes its events)."""
    (tmp / "streams.json").write_text(json.dumps(streams))
    out = tmp / "events.json"
    prefix = ["taskset", "-c", str(cpu)] if cpu is not None and shutil.which("taskset") else []
    argv = [*prefix, sys.executable, __file__, "--client", "--port", str(port)]
    argv += ["--tokens", str(tmp / "streams.json"), "--out", str(out)]
    run = functools.partial(trio.run_process, argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    proc: trio.Process = await nursery.start(run)
    return proc, out


async def wait_line(proc: trio.Process, want: bytes, seconds: float) -> None:
    assert proc.stdout is not None
    got = b""
    with trio.fail_after(seconds):
        while want not in got:
            chunk = await proc.stdout.receive_some(4096)
            if not chunk:
                raise RuntimeError(f"the client ended before {want!r}: {got!r}")
            got += chunk


async def measure(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    homes = -(-args.streams // AGENTS)
    extra = {
        "live_feed_hz": args.hz,
        "listen_streams": max(1024, args.streams),
        "listen_min_interval_s": args.min_interval,
    }
    async with trio.open_nursery() as nursery:
        bridge, granted = await start(
            nursery,
            port=0,
            homes=homes,
            agents=AGENTS,
            stub_cpu=args.client_cpu,
            state=tmp,
            extra=extra,
            stub_args=("--stagger-s", str(args.stagger)),
        )
        granted = granted[: args.streams]
        await warm(bridge, granted)
        streams = [
            (await bridge.issue_token(h, k, a, ("ftw.live.read",)), h) for h, k, a in granted
        ]
        keys = [(h, k) for h, k, _ in granted]
        rss_warm = rss_kib()
        await nursery.start(hold_feeds, bridge, keys)
        rss_feeds = rss_kib()
        if args.trace_memory:
            tracemalloc.start(8)
        port = int(bridge.site.resource.rsplit(":", 1)[1].split("/")[0])
        opened_at = time.monotonic()
        proc, out = await open_client(nursery, port, streams, tmp, args.client_cpu)
        await wait_line(proc, b"open", 600)
        open_s = time.monotonic() - opened_at
        await trio.sleep(args.settle)
        if args.trace_memory:
            stats = tracemalloc.take_snapshot().statistics("traceback")
            tracemalloc.stop()
            total = sum(stat.size for stat in stats) / args.streams
            print(f"traced: {total:.0f} B/stream in all; the most:", file=sys.stderr)
            top = stats[:12]
            for stat in top:
                print(f"{stat.size / args.streams:8.0f} B/stream", file=sys.stderr)
                print("\n".join(stat.traceback.format(limit=4)), file=sys.stderr)
        calls = count_calls(bridge)
        stats = bridge.pool.feeds.stats
        before = (time.process_time(), calls[0], stats.box_reads, stats.updates)
        sent0 = bridge.listens.updates_sent
        t0 = time.time()
        load0 = os.getloadavg()
        await trio.sleep(args.seconds)
        t1 = time.time()
        cpu_s = time.process_time() - before[0]
        reads, feed_reads, frames = (
            calls[0] - before[1],
            stats.box_reads - before[2],
            stats.updates - before[3],
        )
        sent = bridge.listens.updates_sent - sent0
        rss_open = rss_kib()
        load1 = os.getloadavg()
        assert proc.stdin is not None
        await proc.stdin.aclose()
        await proc.wait()
        events: list[list[float]] = json.loads(await trio.Path(out).read_text())
        nursery.cancel_scope.cancel()
    delivered = sum(1 for ev in events for t in ev if t0 <= t < t1)
    lat = latencies_ms(events, keys, t0, t1)
    paced = paced_latencies_ms(events, keys, t0, t1, args.min_interval)
    return {
        "streams": args.streams,
        "homes": homes,
        "hz": args.hz,
        "stagger_s": args.stagger,
        "listen_min_interval_s": args.min_interval,
        "seconds": args.seconds,
        "open_s": round(open_s, 1),
        "updates_delivered": delivered,
        "updates_sent": sent,
        "frames_applied": frames,
        "frames_moved": sum(1 for ts in FRAMES.values() for t in ts if t0 <= t < t1),
        # None when no update came (a stub run `--still` holds its readings for a 5-minute
        # slot; the stub's default meter moves every second): then nothing was measured.
        "bridge_cpu_ms_per_update": round(1000 * cpu_s / delivered, 3) if delivered else None,
        "bridge_cpu_share": round(cpu_s / args.seconds, 3),
        "rss_warm_kib": rss_warm,
        "rss_open_kib": rss_open,
        "rss_feeds_kib": rss_feeds,
        "rss_kib_per_stream": round((rss_open - rss_warm) / args.streams, 2),
        "rss_kib_per_feed": round((rss_feeds - rss_warm) / args.streams, 2),
        "bridge_cpu_ms_per_frame": round(1000 * cpu_s / max(1, frames), 3),
        "latency_ms": {
            "p50": pct(lat, 0.5),
            "p99": pct(lat, 0.99),
            "max": lat[-1] if lat else None,
            "mean": round(statistics.fmean(lat), 2) if lat else None,
            "n": len(lat),
        },
        "latency_past_interval_ms": {
            "p50": pct(paced, 0.5),
            "p99": pct(paced, 0.99),
            "max": paced[-1] if paced else None,
            "n": len(paced),
        },
        "box_reads": reads,
        "feed_box_reads": feed_reads,
        "box_reads_per_update": round(reads / max(1, delivered), 4),
        "loadavg": [round(x, 2) for x in (*load0, *load1)],
    }


async def hold_feeds(
    bridge: Any,
    keys: list[tuple[str, bytes]],
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Hold a reference to every feed until cancelled; started once each has its first snap
    (or ended), so the feeds' own RSS can be told from the streams'."""
    async with contextlib.AsyncExitStack() as stack:
        watches = [await stack.enter_async_context(bridge.pool.feeds.watch(*k)) for k in keys]
        with trio.fail_after(300):
            for w in watches:
                await w.changed.wait()
        task_status.started()
        await trio.sleep_forever()


def count_calls(bridge: Any) -> list[int]:
    """Count every `Pool.call` from now on (box requests of any kind); returns the counter."""
    counter = [0]
    original = bridge.pool.call

    async def call(*a: Any, **kw: Any) -> Any:
        counter[0] += 1
        return await original(*a, **kw)

    bridge.pool.call = call
    return counter


async def main(args: argparse.Namespace) -> None:
    record_frames()
    with tempfile.TemporaryDirectory() as tmp:
        result = await measure(args, Path(tmp))
    print(json.dumps(result), flush=True)


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--streams", type=int, default=1000)
    p.add_argument("--seconds", type=float, default=60.0, help="measured window, s")
    p.add_argument("--settle", type=float, default=8.0, help="unmeasured start, s")
    p.add_argument(
        "--stagger",
        type=float,
        default=5.0,
        help="spread the homes' uptimes (so their pulses) over this many s; 0: all pulse at once",
    )
    p.add_argument("--hz", type=float, default=0.2, help="the feeds' rate (live_feed_hz)")
    p.add_argument(
        "--min-interval", type=float, default=5.0, help="listen_min_interval_s, s (default 5)"
    )
    p.add_argument(
        "--trace-memory",
        action="store_true",
        help="print to stderr where the streams' memory was allocated (tracemalloc; slows the start)",
    )
    p.add_argument("--client-cpu", type=int, default=1 if (os.cpu_count() or 1) > 1 else None)
    p.add_argument("--client", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, help=argparse.SUPPRESS)
    p.add_argument("--tokens", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    return p.parse_args()


if __name__ == "__main__":
    parsed = parse()
    trio.run(client if parsed.client else main, parsed)
