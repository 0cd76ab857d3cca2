"""The rig: a stub home in its own process (`python -m stubbox`), its owner console, and an
agent granted through it, as the demo, the tests, `cluster/`, `soak/` and `bench/` start them.

`start_stub` starts the home and reads its start line; `console` sends one owner command;
`grant_agent` has the bridge's keys part create an agent key, the owner grant it, and waits
until the signed roster naming it reached the bridge.
"""

from __future__ import annotations

import contextlib
import functools
import json
import socket
import subprocess
import sys
from typing import TYPE_CHECKING, Any

import trio

from ftwbridge.proto.registry import READ_SCOPES

if TYPE_CHECKING:
    from ftwbridge.run import Bridge

DEMO_HOME = "demo-home"
WAIT_S = 60.0
"""The most the demo waits for its stub home's roster to reach the bridge, seconds: about a
second on an idle machine, but the demo must not fail on a loaded one."""


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on now."""
    return free_ports(1)[0]


def free_ports(n: int) -> list[int]:
    """`n` different ports on 127.0.0.1 that nothing listens on now: all held open at once
    while they are chosen, so two of them are never the same port (picked one at a time, the
    kernel may hand out a port just closed again: an instance then found its port taken)."""
    with contextlib.ExitStack() as stack:
        held = [stack.enter_context(socket.socket()) for _ in range(n)]
        for s in held:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in held]


async def console(port: int, command: dict[str, Any]) -> Any:
    """Send one command to a stub home's owner console; returns its `ok` value.

    Raises:
        RuntimeError: the console answered with an error.
    """
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(json.dumps(command).encode() + b"\n")
        buf = b""
        while not buf.endswith(b"\n"):
            chunk = await stream.receive_some(65536)
            if not chunk:
                break
            buf += chunk
    answer = json.loads(buf)
    if "error" in answer:
        raise RuntimeError(answer["error"])
    return answer["ok"]


async def home_key(home: str) -> dict[str, Any]:
    """What `python -m stubbox --print-key` prints for `home` (its key seeded by its name, as
    `start_stub` seeds it): `homeKey`, the home's Ed25519 public key in hex, to enroll.

    Raises:
        subprocess.CalledProcessError: the stub exited with an error.
    """
    argv = [sys.executable, "-m", "stubbox", "--home", home, "--seed", home, "--print-key"]
    done = await trio.run_process(argv, capture_stdout=True)
    answer: dict[str, Any] = json.loads(done.stdout.decode().strip().splitlines()[-1])
    return answer


async def start_stub(
    nursery: trio.Nursery,
    door_url: str,
    *extra: str,
    home: str = DEMO_HOME,
    prefix: tuple[str, ...] = (),
) -> tuple[trio.Process, dict[str, Any]]:
    """Start `python -m stubbox` for `home` (`prefix` goes before it, e.g. `taskset -c 1`);
    returns (process, its start line).

    The stub is owned twice over: cancelling `nursery` stops it, and it watches a pipe on its
    standard input (`--exit-with-parent`), so it also exits when this process dies uncleanly.
    """
    argv = [*prefix, sys.executable, "-m", "stubbox", "--bridge", door_url]
    argv += ["--home", home, "--seed", home, "--exit-with-parent", *extra]
    proc: trio.Process = await nursery.start(
        functools.partial(
            trio.run_process, argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, check=False
        )
    )
    assert proc.stdout is not None
    buf = b""
    while b"\n" not in buf:
        chunk = await proc.stdout.receive_some(4096)
        if not chunk:
            raise RuntimeError("the stub home exited before it started")
        buf += chunk
    return proc, json.loads(buf.split(b"\n", 1)[0])


async def grant_agent(
    bridge: Bridge,
    console_port: int,
    home: str,
    *,
    scopes: list[str] | None = None,
    ttl_ms: int = 86_400_000,
    name: str = "Demo assistant",
    ops: list[str] | None = None,
    caps: dict[str, int] | None = None,
) -> tuple[bytes, str]:
    """Create an agent key in the keys part, have the owner grant it (`scopes`, reads by
    default; `ops` and `caps`, none by default), wait for the roster.

    Returns (agent key, agent id).
    """
    key = await bridge.keys.create(home)
    agent_id = "agent-" + key[:4].hex()
    granted = sorted(s.value for s in READ_SCOPES) if scopes is None else scopes
    await console(
        console_port,
        {
            "op": "put_agent",
            "home": home,
            "key": key.hex(),
            "id": agent_id,
            "client": "demo",
            "name": name,
            "scopes": granted,
            "ops": ops or [],
            "caps": caps or {},
            "expiresAtMs": bridge.clock() + ttl_ms,
        },
    )
    with trio.fail_after(WAIT_S):
        await bridge.door.wait_roster(home, lambda r: key in r.agents())
    return key, agent_id
