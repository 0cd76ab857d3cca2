"""A session open's keys-part round trips (`begin`, then `finish` with the box's message 2):
in-process, and through `ftwbridge keys --listen` (its own process, loopback TCP, the mesh
key's channel) on the key file and on sealed keys in PostgreSQL. Also the first request on a
new connection (TCP connect and the channel's handshake). Figures, never asserted.

    .venv/bin/python bench/keys_latency.py [N]
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import trio

from ftwbridge.keys import KeysPort, KeysService
from ftwbridge.keys.remote import RemoteKeys
from ftwbridge.proto.noise import Responder, generate_static

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.store.pgserver import postgres_bin, running_postgres

MESH = os.urandom(32)


async def _open(keys: KeysPort, agent: bytes, box: tuple[bytes, bytes]) -> float:
    start = time.perf_counter()
    handle, m1 = await keys.begin(agent, box[1])
    responder = Responder(our_static=box[0])
    responder.read_message1(m1)
    m2, _ = responder.write_message2()
    await keys.finish(handle, m2)
    return (time.perf_counter() - start) * 1000


def _report(name: str, ms: list[float]) -> None:
    ms.sort()
    p99 = ms[min(len(ms) - 1, int(len(ms) * 0.99))]
    print(f"{name:44s} p50 {statistics.median(ms):6.2f} ms  p99 {p99:6.2f} ms  (n={len(ms)})")


async def _measure(name: str, keys: KeysPort, n: int) -> None:
    agent = await keys.create("bench")
    box = generate_static()
    for _ in range(20):  # warm: the pooled connection, psycopg's prepared statements
        await _open(keys, agent, box)
    _report(name, [await _open(keys, agent, box) for _ in range(n)])


async def _service(nursery: trio.Nursery, env: dict[str, str]) -> tuple[str, int]:
    proc: trio.Process = await nursery.start(
        functools.partial(
            trio.run_process,
            [sys.executable, "-m", "ftwbridge", "keys", "--listen", "127.0.0.1:0"],
            env=env,
            stdout=subprocess.PIPE,
        )
    )
    assert proc.stdout is not None
    line = b""
    while b"\n" not in line:
        line += await proc.stdout.receive_some(4096)
    host, port = line.split(b"\n")[0].decode().removeprefix("keys service on tcp://").split(":")
    return host, int(port)


async def main(n: int, pg_url: str | None) -> None:
    await _measure("in-process (KeysService, memory)", KeysService(None), n)
    base = {k: v for k, v in os.environ.items() if not k.startswith("FTWBRIDGE_")}
    with tempfile.TemporaryDirectory() as tmp:
        async with trio.open_nursery() as nursery:
            env = base | {"FTWBRIDGE_MESH_KEY": MESH.hex(), "FTWBRIDGE_STATE_DIR": tmp}
            address = await _service(nursery, env)
            remote = RemoteKeys([address], MESH)
            await _measure("TCP keys service, key file", remote, n)
            await remote.aclose()
            cold = []
            for _ in range(n // 4):
                once = RemoteKeys([address], MESH)
                start = time.perf_counter()
                await once.has(bytes(32))
                cold.append((time.perf_counter() - start) * 1000)
                await once.aclose()
            _report("first request on a new connection", cold)
            if pg_url is not None:
                sealed = env | {
                    "FTWBRIDGE_DATABASE_URL": pg_url,
                    "FTWBRIDGE_KEK": os.urandom(32).hex(),
                }
                remote = RemoteKeys([await _service(nursery, sealed)], MESH)
                await _measure("TCP keys service, sealed keys in PostgreSQL", remote, n)
                await remote.aclose()
            nursery.cancel_scope.cancel()


if __name__ == "__main__":
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("n", nargs="?", type=int, default=400, help="round trips per case (400)")
    count = p.parse_args().n
    bindir = postgres_bin()
    if bindir is None:
        trio.run(main, count, None)
    else:
        with running_postgres(bindir) as server:
            trio.run(main, count, server.create_database())
