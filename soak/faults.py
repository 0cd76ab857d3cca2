"""The scenarios: each injects one fault while the load runs and says whether the fault did
what it should (its `effect`: `ok`, or what was missing). The invariants after it are the
runner's (`soak/run.py`), the same for every scenario.
"""

from __future__ import annotations

import functools
import signal
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import trio

from . import strangers
from .procs import PY, WAIT_S
from .rig import Soak

CAPS: dict[str, Any] = {
    "calls_in_flight": 4,
    "queue_per_home": 1,
    "sessions_per_home": 2,
    "pace_calls_burst": 3,
    "pace_calls_per_s": 0.5,
    "http_burst": 2,
    "http_per_s": 0.2,
}
"""Caps low enough that the soak's load binds them: 3 agents a home against 2 sessions, a
home's calls against its queue of one (which refuses before the low pacing has to), an
agent's requests against its HTTP limit, and 4 calls in flight for the whole bridge."""

WAKE = (
    "import os, signal, sys, time;"
    " time.sleep(float(sys.argv[1])); os.kill(int(sys.argv[2]), signal.SIGCONT)"
)
"""The stalled home's waker, a process of its own: it sends SIGCONT after the stall even if
the soak dies meanwhile, so a stopped stub never outlives it (it then sees its lifeline closed)."""
HANG_UP_S = 0.3
"""How long a client that hangs up waits for its answer (seconds); the slow home takes 1 s."""


@dataclass(frozen=True)
class Scenario:
    """One fault: `run(soak)` injects it under load and returns its effect (`ok` or why not);
    `config` holds the bridge settings it needs; `slow_home` says it uses the slow home."""

    name: str
    what: str
    run: Callable[[Soak], Awaitable[str]]
    config: dict[str, Any] = field(default_factory=dict)
    slow_home: bool = False


def _expect(checks: dict[str, bool]) -> str:
    missing = [what for what, held in checks.items() if not held]
    return "ok" if not missing else "; ".join(missing)


async def steady(s: Soak) -> str:
    """Load alone: the control row."""
    await trio.sleep(s.t(20))
    return "ok"


async def kill9(s: Soak) -> str:
    """A home's process dies by SIGKILL; it is started again (same keys, same state folder)."""
    stub = s.fleet.solos[0]
    home = stub.homes[0]
    await trio.sleep(s.t(4))
    stub.signal(signal.SIGKILL)
    assert stub.proc is not None
    await stub.proc.wait()
    down = await s.probe(home)
    await trio.sleep(s.t(4))
    await s.fleet.restart(stub)
    back = await s.probe(home, until_ok_s=15)
    await trio.sleep(s.t(6))
    return _expect(
        {
            f"while down: {down.outcome}": down.outcome == "E_UNAVAILABLE",
            f"once back: {back.outcome}": back.outcome == "ok",
        }
    )


async def stall(s: Soak) -> str:
    """A home's process stops (SIGSTOP) for longer than `door_silence_s`, then resumes."""
    stub = s.fleet.solos[1 % len(s.fleet.solos)]
    home = stub.homes[0]
    stall_s = float(s.bridge.running["door_silence_s"]) + 3
    await trio.sleep(s.t(4))
    assert stub.proc is not None
    waker = await s.children.open(
        [PY, "-c", WAKE, str(stall_s), str(stub.proc.pid)], s.root / "waker.log"
    )
    stub.signal(signal.SIGSTOP)
    try:
        during = await s.probe(home)
        with trio.fail_after(stall_s + WAIT_S):
            await waker.wait()
    finally:
        stub.signal(signal.SIGCONT)
    back = await s.probe(home, until_ok_s=20)
    await trio.sleep(s.t(6))
    dropped = any(f"uplink down home={home}" in line for line in s.log())
    return _expect(
        {
            f"during: {during.outcome}": during.answered and during.outcome != "ok",
            "the bridge kept the silent uplink": dropped,
            f"once resumed: {back.outcome}": back.outcome == "ok",
        }
    )


async def revoke(s: Soak) -> str:
    """The owner removes an agent at home (the stub's console) while its token is in use;
    a new agent takes its place."""
    home = s.fleet.load_homes[-1]
    agent = s.fleet.agents[home][0]
    await trio.sleep(s.t(4))
    await s.fleet.revoke(agent)
    after = await s.probe(home, agent)
    await trio.sleep(s.t(5))  # the load keeps using the revoked token
    new = await s.fleet.replace(agent)
    fresh = await s.probe(home, new, until_ok_s=10)
    await trio.sleep(s.t(4))
    assert agent.revoked_at is not None
    served = [
        c
        for c in s.calls()
        if c.agent == agent.id and c.started > agent.revoked_at and c.outcome == "ok"
    ]
    return _expect(
        {
            f"revoked token: {after.outcome}": after.outcome == "HTTP 401",
            f"served after revocation: {len(served)}": not served,
            f"new agent: {fresh.outcome}": fresh.outcome == "ok",
        }
    )


async def hang_up(s: Soak) -> str:
    """Clients hang up before the answer of a slow home (`--delay-ms`), then ask again: each
    hung-up call still finishes and is audited with its outcome and `delivered=no` (a call
    refused in words before the hang-up, by the home's queue, was answered, not hung up)."""
    home = "soak-slow"
    count = s.n(6)
    await trio.sleep(s.t(3))
    before = len(s.load.calls)
    async with s.load.client() as http, trio.open_nursery() as nursery:
        for _ in range(count):
            agent = s.fleet.next_agent(home)
            hang = functools.partial(s.load.call, hang_up_s=HANG_UP_S)
            nursery.start_soon(hang, http, s.scenario, agent, "status", {})
            await trio.sleep(0.2)
    batch = [c for c in s.load.calls[before:] if c.home == home]
    async with s.load.client() as http, trio.open_nursery() as nursery:
        for agent in s.fleet.agents[home]:
            nursery.start_soon(s.load.call, http, s.scenario, agent, "status", {})
    await trio.sleep(s.t(4))
    hung = sum(1 for c in batch if c.outcome == "hung_up")
    early = sum(1 for c in batch if c.answered)  # refused in words before the hang-up
    audited = [line for line in s.log() if f"home={home}" in line and "delivered=no" in line]
    seen = len(audited)
    finished = sum(1 for line in audited if "status=cancelled" not in line)
    return _expect(
        {
            f"hung up {hung} of {count} ({early} answered first)": hung + early == count
            and hung > 0,
            f"the bridge saw {seen} of {hung} hang-ups": seen == hung,
            f"{finished} of {seen} hung-up calls audited with their outcome": finished == seen,
        }
    )


async def garbage(s: Soak) -> str:
    """Strangers at the door: random bytes, broken frames, CBOR the door refuses, 1 MiB
    messages before authenticating, silence after the upgrade, connect-and-close."""
    counts = {"bytes": 6, "frames": 6, "cbor": 6, "oversized": 20, "silent": 4, "knock": 40}
    bound_s = float(s.bridge.running["door_hello_s"]) + 10
    said: dict[str, Counter[str]] = {kind: Counter() for kind in counts}
    limiter = trio.CapacityLimiter(24)

    async def one(kind: str) -> None:
        async with limiter:
            said[kind][await strangers.visit(kind, s.bridge.door_port, bound_s)] += 1

    await trio.sleep(s.t(3))
    async with trio.open_nursery() as nursery:
        for kind, n in counts.items():
            for _ in range(s.n(n)):
                nursery.start_soon(one, kind)
    await trio.sleep(s.t(4))
    checks = {}
    for kind, seen in said.items():
        expected = strangers.KINDS[kind][1]
        wrong = {k: v for k, v in seen.items() if k != expected}
        checks[f"{kind}: " + ", ".join(f"{v}x {k}" for k, v in wrong.items())] = not wrong
    faulty = sum(sum(said[kind].values()) for kind in ("frames", "cbor", "oversized"))
    logged = sum(1 for line in s.log() if "connection fault from" in line)
    checks[f"{logged} of {faulty} faults logged"] = logged >= faulty
    return _expect(checks)


async def sigterm(s: Soak) -> str:
    """SIGTERM to the bridge under load (it drains), then `ftwbridge serve` again on the same
    state folder; the homes redial."""
    await trio.sleep(s.t(5))
    status, took = await s.restart_bridge()
    home = s.fleet.load_homes[0]
    back = await s.probe(home, until_ok_s=15)
    await trio.sleep(s.t(8))
    bound = float(s.bridge.running["drain_s"]) + 3
    return _expect(
        {
            f"exit status {status}": status == 0,
            f"stopped in {took:.1f} s": took <= bound,
            f"once back: {back.outcome}": back.outcome == "ok",
        }
    )


async def caps(s: Soak) -> str:
    """The bridge runs with caps low enough to bind (`CAPS`), at twice the load."""
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(s.load.run, s.scenario, stop, s.fleet.load_homes)
        await trio.sleep(s.t(20))
        stop.set()
    seen = Counter(c.outcome for c in s.calls())
    return _expect(
        {
            f"{what} never bound": seen[code] > 0
            for what, code in (
                ("sessions_per_home", "E_CAP_EXCEEDED"),
                ("pacing or queue_per_home", "E_RATE_LIMITED"),
                ("http_burst", "HTTP 429"),
            )
        }
    )


SCENARIOS = [
    Scenario("steady", "load alone", steady),
    Scenario("kill9", "a home's process killed (-9) and started again", kill9),
    Scenario("stall", "a home's process stopped past door_silence_s, then resumed", stall),
    Scenario("revoke", "the owner removes an agent under load", revoke),
    Scenario("hangup", "clients hang up before a slow home answers", hang_up, slow_home=True),
    Scenario("garbage", "garbage and oversized traffic on the door", garbage),
    Scenario("sigterm", "SIGTERM to the bridge under load, then started again", sigterm),
    Scenario("caps", "caps set low enough to bind", caps, config=CAPS),
]
"""Every scenario, in the order a full soak runs them (the bridge restarts last)."""
BY_NAME = {sc.name: sc for sc in SCENARIOS}
