"""A store lookup's latency through the thread limiter, SQLite against PostgreSQL.

    .venv/bin/python bench/store_latency.py [--database-url URL] [--n 3000]

Without `--database-url` it starts a throwaway PostgreSQL (tests/store/pgserver.py, Debian's
`postgresql`). Each store holds 1,000 access tokens; the figures are `Store.token` lookups of
random ones: one task after another (p50/p99 in ms), then 32 tasks at once (lookups a second).
Then the directory on PostgreSQL: `PgDirectory.holder` lookups (p50/p99), and how long after
a `kill -9` of the process holding a home the lookups stop naming it (presence tied to its
connection), over `--kills` processes; and from a roster's save to its event at another
listener (LISTEN/NOTIFY). Speed figures live here, never in the tests.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import trio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ftwbridge.store import BridgeStore, SqliteStore, TokenRecord, hash_token  # noqa: E402

TOKENS = 1000
TASKS = 32


async def measure(store: BridgeStore, n: int) -> dict[str, float]:
    """p50 and p99 of one lookup (ms), and lookups a second with `TASKS` tasks."""
    await store.start()
    hashes = [hash_token(f"t{i}") for i in range(TOKENS)]
    record = TokenRecord("h1", "a1", b"a" * 32, ("ftw.live.read",), "http://x/mcp", "c", 10**15)
    for h in hashes:
        await store.put_token(h, record)
    for h in hashes[:200]:  # warm the connections and the database's cache
        await store.token(h)
    times = []
    for _ in range(n):
        started = time.perf_counter()
        await store.token(random.choice(hashes))
        times.append((time.perf_counter() - started) * 1000)
    q = statistics.quantiles(times, n=100)
    done = 0

    async def worker() -> None:
        nonlocal done
        for _ in range(n // TASKS):
            await store.token(random.choice(hashes))
            done += 1

    started = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for _ in range(TASKS):
            nursery.start_soon(worker)
    rate = done / (time.perf_counter() - started)
    return {"p50_ms": q[49], "p99_ms": q[98], "per_s_32_tasks": rate}


HOLDER_SCRIPT = """
import sys, trio
from ftwbridge.store.postgres import PgStore
from ftwbridge.store.pg_directory import PgDirectory
async def main():
    store = PgStore(sys.argv[1], connections=1)
    await store.start()
    d = PgDirectory(store, instance_id=sys.argv[2], url="", wall_ms=lambda: 0, lease_s=1e9)
    async def lost(home): pass
    async with trio.open_nursery() as n:
        await n.start(d.serve, lost)
        await d.claim(sys.argv[2])
        print("ready", flush=True)
        await trio.sleep_forever()
trio.run(main)
"""


async def directory_figures(url: str, n: int, kills: int) -> dict[str, float]:
    """`holder` p50/p99 (ms), and the p50/max of the time from `kill -9` to gone (ms)."""
    import subprocess

    from ftwbridge.store.pg_directory import PgDirectory
    from ftwbridge.store.postgres import PgStore

    store = PgStore(url)
    await store.start()
    directory = PgDirectory(store, instance_id="bench", url="", wall_ms=lambda: 0, lease_s=1e9)
    try:
        async with trio.open_nursery() as nursery:

            async def lost(home: str) -> None:
                return None

            await nursery.start(directory.serve, lost)
            for i in range(100):
                await directory.claim(f"h{i}")
            times = []
            for _ in range(n):
                started = time.perf_counter()
                await directory.holder(f"h{random.randrange(100)}")
                times.append((time.perf_counter() - started) * 1000)
            q = statistics.quantiles(times, n=100)
            gone = []
            for k in range(kills):
                name = f"victim{k}"
                argv = [sys.executable, "-c", HOLDER_SCRIPT, url, name]
                proc = await trio.lowlevel.open_process(argv, stdout=subprocess.PIPE, cwd=ROOT)
                assert proc.stdout is not None
                line = b""
                with trio.fail_after(30):
                    while not line.endswith(b"\n"):
                        chunk = await proc.stdout.receive_some(64)
                        assert chunk, "the holder process exited"
                        line += chunk
                assert await directory.holder(name) is not None
                started = time.perf_counter()
                proc.kill()
                while await directory.holder(name) is not None:
                    pass
                gone.append((time.perf_counter() - started) * 1000)
                await proc.wait()
            nursery.cancel_scope.cancel()
    finally:
        store.close()
    return {
        "holder_p50_ms": q[49],
        "holder_p99_ms": q[98],
        "kill9_gone_p50_ms": statistics.median(gone),
        "kill9_gone_max_ms": max(gone),
    }


async def event_figures(url: str, n: int) -> dict[str, float]:
    """p50/p99 (ms) from a roster's save by one store (its own pool) to its event at another
    store's `Events` listener."""
    from ftwbridge.store.events import Event, Events
    from ftwbridge.store.postgres import PgStore

    writer, reader = PgStore(url), PgStore(url)
    await writer.start()
    await reader.start()
    send, receive = trio.open_memory_channel[tuple[Event, float]](n)

    async def heard(event: Event) -> None:
        await send.send((event, time.perf_counter()))

    async def gap() -> None:
        return None

    times = []
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(Events(reader).serve, heard, gap)
            for seq in range(n):
                started = time.perf_counter()
                await writer.put_roster("bench", seq, b"")
                event, at = await receive.receive()
                assert event.fields["seq"] == seq
                times.append((at - started) * 1000)
            nursery.cancel_scope.cancel()
    finally:
        writer.close()
        reader.close()
    q = statistics.quantiles(times, n=100)
    return {"save_to_event_p50_ms": q[49], "save_to_event_p99_ms": q[98]}


@contextlib.contextmanager
def _database(url: str | None) -> Iterator[str]:
    if url is not None:
        yield url
        return
    from tests.store.pgserver import postgres_bin, running_postgres

    bindir = postgres_bin()
    if bindir is None:
        raise SystemExit("no PostgreSQL here: make postgres, or pass --database-url")
    with running_postgres(bindir) as server:
        yield server.create_database()


def main() -> None:
    """Print the figures of both stores."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--database-url", default=None)
    p.add_argument("--n", type=int, default=3000)
    p.add_argument("--kills", type=int, default=5)
    args = p.parse_args()
    from ftwbridge.store.postgres import PgStore

    with tempfile.TemporaryDirectory() as tmp, _database(args.database_url) as url:
        for name, store in (
            ("sqlite", SqliteStore(Path(tmp) / "b.sqlite")),
            ("postgres", PgStore(url)),
        ):
            try:
                figures = trio.run(measure, store, args.n)
            finally:
                store.close()
            shown = ", ".join(
                f"{k} {v:.2f}" if "ms" in k else f"{k} {v:.0f}" for k, v in figures.items()
            )
            print(f"{name}: {shown}")
        figures = trio.run(directory_figures, url, args.n, args.kills)
        print("directory: " + ", ".join(f"{k} {v:.2f}" for k, v in figures.items()))
        figures = trio.run(event_figures, url, min(args.n, 1000))
        print("events: " + ", ".join(f"{k} {v:.2f}" for k, v in figures.items()))


if __name__ == "__main__":
    main()
