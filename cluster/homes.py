"""The cluster's stub homes: each enrolled, started in its own process (its box dialing
through HAProxy, or one instance's door for the bench), and granted one agent with a token.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import trio

from ftwbridge.demo import console
from ftwbridge.mcp.auth import TokenMinter
from ftwbridge.proto.registry import READ_SCOPES

from .procs import PY, CannotStart, Child, child_env, pin, start_child

if TYPE_CHECKING:
    from .rig import Cluster


def wall_ms() -> int:
    """The wall clock, ms since the epoch."""
    return int(time.time() * 1000)


ROSTER_S = 30.0
"""Bound on a granted agent's roster reaching the database, seconds."""


@dataclass
class Home:
    """A stub home in its own process: its `name`, owner `console` port and the `stub`;
    once an agent is granted, the agent's `key`, `agent_id` and an access `token`."""

    name: str
    stub: Child
    console: int
    key: bytes = b""
    agent_id: str = ""
    token: str = ""


async def _start_home(cluster: Cluster, nursery: trio.Nursery, name: str) -> Home:
    """Enroll home `name` (its key from `stubbox --print-key`), then start its stub, which
    dials through HAProxy."""
    seed = ["--home", name, "--seed", name]
    shown = await trio.run_process(
        [PY, "-m", "stubbox", *seed, "--print-key"],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
        env=child_env(),
    )
    if shown.returncode != 0:
        raise CannotStart(f"the stub home {name} did not start: {shown.stderr.decode()[-300:]}")
    await cluster.store.enroll_home(name, bytes.fromhex(json.loads(shown.stdout)["homeKey"]))
    opts = cluster.options
    door = cluster.door_url if opts.boxes_at is None else cluster.instance(opts.boxes_at).door_url
    argv = [*pin(opts.cpus.get("homes")), PY, "-m", "stubbox", "--bridge", door, *seed]
    argv += ["--approve-all", *opts.stub_args]
    argv += ["--exit-with-parent", "--state", str(cluster.root / "stubs")]
    stub = await start_child(
        nursery, f"stub home {name}", argv, cluster.root / f"{name}.log", ready='"console"'
    )
    return Home(name, stub, int(json.loads(stub.line)["console"]))


async def grant(cluster: Cluster, home: Home) -> None:
    """Have the keys service make an agent key for `home`, its owner grant it the read
    scopes, wait for that roster in the database, and mint a token for HAProxy's `/mcp`.

    Raises:
        CannotStart: the keys service refused, or the roster did not arrive within `ROSTER_S`.
    """
    config = cluster.instances[0].config_path
    made = await trio.run_process(
        [PY, "-m", "ftwbridge", "agent", "create", "--home", home.name, "--config", str(config)],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
        env=child_env(),
    )
    if made.returncode != 0:
        raise CannotStart(made.stderr.decode(errors="replace").strip())
    home.key = bytes.fromhex(made.stdout.decode().strip())
    home.agent_id = "agent-" + home.key[:4].hex()
    scopes = sorted(s.value for s in READ_SCOPES)
    row = {
        "op": "put_agent",
        "home": home.name,
        "key": home.key.hex(),
        "id": home.agent_id,
        "client": "cluster",
        "name": "Cluster assistant",
        "scopes": scopes,
        "ops": [],
        "caps": {},
        "expiresAtMs": wall_ms() + 86_400_000,
    }
    await console(home.console, row)
    with trio.move_on_after(ROSTER_S):
        await cluster.wait_listed(home.name, home.key)
        minter = TokenMinter(
            put=cluster.store.put_token, resource=lambda: cluster.url, ttl_s=3600, wall_ms=wall_ms
        )
        home.token = await minter.mint(home.name, home.key, home.agent_id, tuple(scopes), "cluster")
        return
    raise CannotStart(f"the roster of {home.name} did not reach PostgreSQL in {ROSTER_S:g} s")


async def start_homes(cluster: Cluster, nursery: trio.Nursery, count: int) -> None:
    """Start `count` stub homes at once in `nursery`, each granted an agent (`grant`)."""

    async def one(name: str) -> None:
        made = await _start_home(cluster, nursery, name)
        cluster.homes.append(made)
        await grant(cluster, made)

    async with trio.open_nursery() as starting:
        for i in range(count):
            starting.start_soon(one, f"home-{i + 1}")
    cluster.homes.sort(key=lambda h: h.name)
