"""A store lookup's latency through the thread limiter, SQLite against PostgreSQL.

    .venv/bin/python bench/store_latency.py [--database-url URL] [--n 3000]

Without `--database-url` it starts a throwaway PostgreSQL (tests/store/pgserver.py, Debian's
`postgresql`). Each store holds 1,000 access tokens; the figures are `Store.token` lookups of
random ones: one task after another (p50/p99 in ms), then 32 tasks at once (lookups a second).
Speed figures live here, never in the tests.
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ftwbridge.store import BridgeStore, SqliteStore, TokenRecord, hash_token

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


if __name__ == "__main__":
    main()
