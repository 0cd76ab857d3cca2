"""The cluster's stub homes: each enrolled, started in its own process (its box dialing
through HAProxy, or one instance's door for the bench), its owner approving at once
(`--approve-all`), and the cluster's assistant signed in at each through HAProxy
(`cluster/signin.py`).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import trio

from .procs import PY, CannotStart, Child, child_env, pin, start_child
from .signin import register, sign_in

if TYPE_CHECKING:
    from .rig import Cluster


def wall_ms() -> int:
    """The wall clock, ms since the epoch."""
    return int(time.time() * 1000)


@dataclass
class Home:
    """A stub home in its own process: its `name`, owner `console` port and the `stub`;
    once the assistant signed in, its agent's `key`, `agent_id` and its access `token`."""

    name: str
    stub: Child
    console: int
    key: bytes = b""
    agent_id: str = ""
    token: str = ""
    sign_in_s: float = 0.0
    """How long the assistant's sign-in through HAProxy took, seconds."""


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


async def start_homes(cluster: Cluster, nursery: trio.Nursery, count: int) -> None:
    """Start `count` stub homes at once in `nursery`; the cluster's assistant, registered
    once, signs in at each for real through HAProxy (`signin.sign_in`).

    Raises:
        CannotStart: a home did not start, or a sign-in failed (its one sentence).
    """
    client_id = await register(cluster)

    async def one(name: str) -> None:
        made = await _start_home(cluster, nursery, name)
        cluster.homes.append(made)
        await sign_in(cluster, made, client_id)

    async with trio.open_nursery() as starting:
        for i in range(count):
            starting.start_soon(one, f"home-{i + 1}")
    cluster.homes.sort(key=lambda h: h.name)
