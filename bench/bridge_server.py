"""The bridge under test: `status` bridged for real to stub homes in another process.

`python bench/bridge_server.py --port P --homes H --agents A --tokens FILE [--stub-cpu N]`
starts the bridge in this process (pacing and HTTP limits raised so the figure measures the
bridge), starts a stub fleet of H homes in its own process (pinned to `--stub-cpu`), grants A
agents per home, warms every session, writes the tokens to FILE, and serves until killed.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

import trio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from devtools.rig import console, start_stub  # noqa: E402
from ftwbridge.config import Config  # noqa: E402
from ftwbridge.keys import KeysService  # noqa: E402
from ftwbridge.lifecycle import settle_heap, until_stdin_closes  # noqa: E402
from ftwbridge.proto.names import Read  # noqa: E402
from ftwbridge.run import Bridge  # noqa: E402

UNLIMITED = {
    "pace_calls_burst": 1e9,
    "pace_calls_per_s": 1e9,
    "pace_bytes_burst": 1 << 40,
    "pace_bytes_per_s": 1 << 40,
    "queue_per_home": 100_000,
    "http_burst": 1e9,
    "http_per_s": 1e9,
    "door_msgs_burst": 1e9,
    "door_msgs_per_s": 1e9,
    "door_bytes_burst": 1 << 40,
    "door_bytes_per_s": 1 << 40,
    "warm_sessions": 100_000,
    "idle_close_s": 3600.0,
}


async def grant_fleet(
    bridge: Bridge, console_port: int, homes: list[str], agents: int
) -> list[tuple[str, bytes, str]]:
    """Grant `agents` agents at each home in one roster per home; returns (home, key, id)."""
    out = []
    expires = bridge.clock() + 86_400_000
    for home in homes:
        rows = []
        for i in range(agents):
            key = await bridge.keys.create(home)
            rows.append(
                {
                    "key": key.hex(),
                    "id": f"{home}-a{i}",
                    "name": "bench",
                    "scopes": ["ftw.live.read"],
                    "expiresAtMs": expires,
                }
            )
            out.append((home, key, f"{home}-a{i}"))
        await console(console_port, {"op": "put_agents", "home": home, "agents": rows})
    with trio.fail_after(120):
        for home in homes:
            keys = {k for h, k, _ in out if h == home}
            await bridge.door.wait_roster(home, lambda r, keys=keys: keys <= set(r.agents()))  # type: ignore[misc]
    return out


async def start(
    nursery: trio.Nursery,
    *,
    port: int,
    homes: int,
    agents: int,
    stub_cpu: int | None,
    state: Path,
    extra: dict[str, object] | None = None,
    stub_args: tuple[str, ...] = (),
) -> tuple[Bridge, list[tuple[str, bytes, str]]]:
    config = Config(
        bind=f"127.0.0.1:{port}",
        public_url=f"http://127.0.0.1:{port}",
        state_dir=state,
        admin_bind=None,
        **({"door_bind": "127.0.0.1:0"} | UNLIMITED | (extra or {})),
    )
    bridge = Bridge(config, keys=KeysService(None))
    await nursery.start(bridge.serve)
    settle_heap()  # as `ftwbridge serve` does once it serves
    door = bridge.door_url  # the door's own listener
    assert door is not None  # set once the bridge serves
    prefix = (
        ["taskset", "-c", str(stub_cpu)] if stub_cpu is not None and shutil.which("taskset") else []
    )
    fleet = ("--fleet", str(max(homes, 2)), "--no-read-limit")
    keys = await trio.run_process(  # enrolled before they dial: no backoff after a 4403
        [sys.executable, "-m", "stubbox", "--home", "b", "--seed", "b", *fleet, "--print-key"],
        capture_stdout=True,
    )
    rows: list[dict[str, str]] = json.loads(keys.stdout)["fleet"]
    names = [row["home"] for row in rows]
    for row in rows:
        await bridge.store.enroll_home(row["home"], bytes.fromhex(row["homeKey"]))
    _proc, line = await start_stub(
        nursery, door, *fleet, *stub_args, home="b", prefix=tuple(prefix)
    )
    with trio.fail_after(120):
        for name in names:
            await bridge.door.wait_roster(name, lambda r: True)
    granted = await grant_fleet(bridge, line["console"], names, agents)
    return bridge, granted


async def warm(
    bridge: Bridge, granted: list[tuple[str, bytes, str]], concurrency: int = 64
) -> float:
    """Open every agent's session (a live read each); returns seconds taken."""
    limiter = trio.CapacityLimiter(concurrency)
    start = trio.current_time()

    async def one(home: str, key: bytes) -> None:
        async with limiter:
            await bridge.pool.call(home, key, Read.LIVE_GET)

    async with trio.open_nursery() as n:
        for home, key, _ in granted:
            n.start_soon(one, home, key)
    return trio.current_time() - start


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        async with trio.open_nursery() as nursery:
            bridge, granted = await start(
                nursery,
                port=args.port,
                homes=args.homes,
                agents=args.agents,
                stub_cpu=args.stub_cpu,
                state=Path(tmp),
            )
            await warm(bridge, granted)
            tokens = [await bridge.issue_token(h, k, a, ("ftw.live.read",)) for h, k, a in granted]
            await trio.Path(args.tokens).write_text(json.dumps(tokens))
            print("ready", flush=True)
            await until_stdin_closes()  # the bench passes a pipe: its end is ours
            nursery.cancel_scope.cancel()


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--homes", type=int, default=16)
    p.add_argument("--agents", type=int, default=4)
    p.add_argument("--tokens", required=True)
    p.add_argument("--stub-cpu", type=int, default=None)
    trio.run(main, p.parse_args())
