"""`make cluster` and the cluster's operational cases (docs/operations.md, "`make cluster`"), with the real
parts: Debian's PostgreSQL and HAProxy, `ftwbridge serve` instances and stub homes as processes
on 127.0.0.1.

`python -m cluster --once` runs the scripted session through HAProxy and leaves no process
behind, nor does a run killed with SIGKILL; what cannot start is one sentence. Then, on one
running cluster (`cluster.rig.open_cluster`): `kill -9` of the instance holding a home while
calls to it run, PostgreSQL restarted while calls run, and a rolling restart of every instance
while calls run. Every wait is bounded generously (a loaded 2-core machine); nothing asserts a
speed. Skipped, saying why, where PostgreSQL or HAProxy is not installed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest
import trio
from prometheus_client.parser import text_string_to_metric_families

from cluster.procs import CannotStart
from cluster.rig import Cluster, Options, open_cluster
from cluster.services import NO_HAPROXY, NO_POSTGRES, Postgres
from ftwbridge.mcp.control_tools import CONTROL_TOOLS
from ftwbridge.mcp.tools import TOOLS
from ftwbridge.oauth.model import REGISTER_ADDRESS_BURST
from tests.store.pgserver import postgres_bin

ROOT = Path(__file__).resolve().parents[2]
RUN_S = 300.0
"""Bound on a whole `cluster --once` run, seconds."""
ORPHAN_S = 60.0
"""Bound on every child's exit once the cluster was SIGKILLed, seconds: an instance drains
(`drain_s` 3), a lifeline gives its program 10 s before SIGKILL."""
RECONNECT_S = 30.0
"""Bound on a killed holder's box redialing through HAProxy and its home answering again,
seconds: the stub's first redial comes within 0.75 s, HAProxy drops a dead server within 2 s."""
RESYNC_S = 30.0
"""Bound on the cluster's re-sync after PostgreSQL returns (presence, leases, events), s."""
OUTAGE_S = 6.0
"""How long PostgreSQL stays down under load, seconds (a call at its holder is served with no
directory lookup; one entering elsewhere cannot be forwarded meanwhile)."""
LEAK_FDS = 12
"""Descriptors a survivor may hold beyond its count before the kill: the uplinks it took
over and its pooled connections to the other instances, never one per call."""

NEEDS = [
    pytest.mark.skipif(postgres_bin() is None, reason=NO_POSTGRES + "; the cluster tests skip"),
    pytest.mark.skipif(
        shutil.which("haproxy") is None, reason=NO_HAPROXY + "; the cluster tests skip"
    ),
]


def needs_parts(test: Any) -> Any:
    """Skip `test`, saying why, where PostgreSQL or HAProxy is not installed (`make postgres`,
    `make haproxy`)."""
    for mark in NEEDS:
        test = mark(test)
    return test


META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
}


def running_with(marker: str) -> list[str]:
    """Processes whose command line or environment holds `marker` (root reads them all)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            seen = (
                Path(f"/proc/{pid}/cmdline").read_bytes()
                + Path(f"/proc/{pid}/environ").read_bytes()
            )
        except OSError:  # gone meanwhile, or not ours to read
            continue
        if marker.encode() in seen and int(pid) != os.getpid():
            found.append(
                Path(f"/proc/{pid}/cmdline")
                .read_bytes()
                .replace(b"\0", b" ")
                .decode(errors="replace")[:120]
            )
    return found


async def test_a_port_in_use_is_one_sentence() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with trio.fail_after(RUN_S):
            done = await trio.run_process(
                [sys.executable, "-m", "cluster", "--once", "--port", str(port)],
                cwd=ROOT,
                capture_stdout=True,
                capture_stderr=True,
                check=False,
            )
    err = done.stderr.decode()
    assert done.returncode == 2, (done.returncode, err)
    assert err == (
        f"cluster: HAProxy cannot listen on 127.0.0.1:{port}: the port is in use"
        ' (make cluster CLUSTER_ARGS="--port N" picks another)\n'
    )


async def test_postgresql_missing_is_one_sentence(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import tests.store.pgserver

    monkeypatch.setattr(tests.store.pgserver, "postgres_bin", lambda: None)
    with pytest.raises(CannotStart) as caught:
        await Postgres.init(tmp_path, 0)
    assert str(caught.value) == NO_POSTGRES
    assert "make postgres" in NO_POSTGRES


@needs_parts
async def test_cluster_once_runs_the_session_through_haproxy_and_leaves_nothing() -> None:
    marker = "ftwbridge-cluster-test-" + uuid.uuid4().hex
    env = {**os.environ, "CLUSTER_TEST_MARK": marker}
    with trio.fail_after(RUN_S):
        done = await trio.run_process(
            [sys.executable, "-m", "cluster", "--once"],
            cwd=ROOT,
            env=env,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    out, err = done.stdout.decode(), done.stderr.decode()
    said = f"status {done.returncode}\n{out[-3000:]}\n{err[-3000:]}"
    assert done.returncode == 0, said
    tools = len(TOOLS) + len(CONTROL_TOOLS)  # the reads and control
    assert f"[2026-07-28] protocol 2026-07-28: {tools} tools" in out, said
    assert f"[legacy] protocol 2025-11-25: {tools} tools" in out, said
    held = re.findall(r"uplink at (\S+);", out)
    assert len(held) == 3 and all(h in ("b1", "b2", "b3") for h in held), said
    # each home's token came from the real sign-in through HAProxy, its steps round robin
    assert out.count("the assistant signed in through HAProxy in ") == 3, said
    assert "OAuth metadata through HAProxy: issuer http://127.0.0.1:" in out, said
    assert "cluster session done" in out, said
    assert "Traceback" not in err, err
    assert running_with(marker) == [], "processes outlived `cluster --once`"


@needs_parts
async def test_cluster_killed_with_sigkill_takes_every_process_along() -> None:
    marker = "ftwbridge-cluster-test-" + uuid.uuid4().hex
    env = {**os.environ, "CLUSTER_TEST_MARK": marker}
    argv = [sys.executable, "-m", "cluster", "--port", "0", "--homes", "1"]
    proc = await trio.lowlevel.open_process(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE)
    assert proc.stdout is not None
    out = b""
    with trio.fail_after(RUN_S):
        while b"Ctrl-C stops the cluster." not in out:
            chunk = await proc.stdout.receive_some(65536)
            assert chunk, f"the cluster ended before it served: {out.decode()[-2000:]}"
            out += chunk
    folder = next(
        ln.split(": ", 1)[1] for ln in out.decode().splitlines() if "logs and configs" in ln
    )
    assert len(running_with(marker)) >= 8, "the cluster's processes are not all running"
    proc.kill()
    await proc.wait()
    await proc.stdout.aclose()
    left = running_with(marker)
    for _ in range(int(ORPHAN_S / 0.5)):  # polled: each child notices its lifeline's end
        if not left:
            break
        await trio.sleep(0.5)
        left = running_with(marker)
    shutil.rmtree(folder, ignore_errors=True)  # SIGKILL left the run no chance to remove it
    assert left == [], "processes outlived a SIGKILLed cluster"


@dataclass
class Outcome:
    """One call as the assistant met it: `ok` (a result), `words` (an error it can read), or
    neither (`silent`: a transport error, an empty or unreadable answer); `at` is when it
    ended (trio clock, s)."""

    kind: str
    text: str
    at: float


def classify(status: int, body: bytes) -> tuple[str, str]:
    """(kind, text) of an HTTP answer to a `tools/call` (JSON or one SSE event)."""
    text = body.decode(errors="replace")
    if text.startswith(("event:", "data:")):
        text = next((ln[5:] for ln in text.splitlines() if ln.startswith("data:")), "")
    try:
        data: Any = json.loads(text)
    except ValueError:
        return "silent", f"{status}: {text[:200]!r}"
    if isinstance(data, dict) and isinstance(data.get("error"), dict):
        message = str(data["error"].get("message", ""))
        return ("words" if message.strip() else "silent"), f"{status}: {message}"
    result = data.get("result") if isinstance(data, dict) else None
    if status == 200 and isinstance(result, dict):
        if not result.get("isError"):
            return "ok", "ok"
        content = result.get("content") or [{}]
        message = str(content[0].get("text", ""))
        return ("words" if message.strip() else "silent"), message
    return "silent", f"{status}: {text[:200]!r}"


async def call_status(http: httpx2.AsyncClient, url: str, token: str) -> Outcome:
    """One `tools/call status` in the 2026-07-28 era; never raises for what the server did."""
    headers = {
        "Authorization": f"Bearer {token}",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": "tools/call",
        "Mcp-Name": "status",
    }
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "status", "arguments": {}, "_meta": META},
    }
    try:
        r = await http.post(url, json=body, headers=headers)
    except httpx2.HTTPError as exc:
        return Outcome("silent", f"{type(exc).__name__}: {exc}", trio.current_time())
    kind, text = classify(r.status_code, r.content)
    return Outcome(kind, text, trio.current_time())


class Load:
    """Callers of `status` at `url`, each in a loop until `stop`; every outcome recorded."""

    def __init__(self, url: str, token: str, callers: int = 3) -> None:
        self.url, self.token, self.callers = url, token, callers
        self.outcomes: list[Outcome] = []
        self.stop = trio.Event()
        self._answered = trio.Event()

    async def run(self) -> None:
        """Call until `stop` is set."""
        async with httpx2.AsyncClient(timeout=60) as http, trio.open_nursery() as nursery:
            for _ in range(self.callers):
                nursery.start_soon(self._caller, http)

    async def _caller(self, http: httpx2.AsyncClient) -> None:
        while not self.stop.is_set():
            self.outcomes.append(await call_status(http, self.url, self.token))
            self._answered.set()
            self._answered = trio.Event()
            await trio.sleep(0.05)  # the load's pace, not a wait for an event

    async def ok_after(self, since: float) -> None:
        """Return once a call that ended after `since` succeeded (the caller bounds it)."""
        while not any(o.kind == "ok" and o.at > since for o in self.outcomes):
            await self._answered.wait()


async def survivor_state(cluster: Cluster, name: str) -> dict[str, float]:
    """An instance's open descriptors and in-flight and queued calls (its `/metrics`)."""
    made = cluster.instance(name)
    assert made.child is not None
    async with httpx2.AsyncClient(timeout=30) as http:
        text = (await http.get(f"http://127.0.0.1:{made.admin_port}/metrics")).text
    values = {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}
    return {
        "fds": float(len(os.listdir(f"/proc/{made.child.pid}/fd"))),
        "in_flight": values.get("ftwbridge_calls_in_flight", 0.0),
        "queued": values.get("ftwbridge_calls_queued", 0.0),
    }


def not_in_words(outcomes: list[Outcome]) -> list[str]:
    return [o.text for o in outcomes if o.kind == "silent"]


async def kill_the_holder(cluster: Cluster) -> str:
    """kill -9 of the instance holding home-1 while calls to it run through HAProxy; returns
    the killed instance's id."""
    home = cluster.homes[0]
    victim = await cluster.holder(home.name)
    assert victim is not None, f"no instance holds {home.name}"
    survivors = [i.name for i in cluster.instances if i.name != victim]
    before = {name: await survivor_state(cluster, name) for name in survivors}
    calls = Load(cluster.url, home.token)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(calls.run)
        with trio.fail_after(RECONNECT_S):
            await calls.ok_after(0)
        killed_at = trio.current_time()
        victim_child = cluster.instance(victim).child
        assert victim_child is not None
        victim_child.signal(signal.SIGKILL)
        with trio.fail_after(RECONNECT_S):
            taken = await cluster.wait_holder(home.name, lambda h: h is not None and h != victim)
        assert taken in survivors
        with trio.move_on_after(RECONNECT_S):
            await calls.ok_after(killed_at)
        calls.stop.set()
    outcomes = calls.outcomes
    after_kill = [o for o in outcomes if o.at > killed_at]
    assert any(o.kind == "ok" for o in after_kill), (
        f"no call succeeded within {RECONNECT_S:g} s of the kill: {[o.text for o in after_kill][-5:]}"
    )
    assert not_in_words(outcomes) == [], "calls that did not end in words"
    for name in survivors:
        for _ in range(int(RESYNC_S / 0.5)):  # polled: the survivor's calls still ending
            state = await survivor_state(cluster, name)
            if not state["in_flight"] and not state["queued"]:
                break
            await trio.sleep(0.5)
        assert not state["in_flight"] and not state["queued"], (name, state)
        assert state["fds"] <= before[name]["fds"] + LEAK_FDS, (name, before[name], state)
    return victim


async def restart_postgres_under_load(cluster: Cluster) -> None:
    """PostgreSQL stopped and started while calls run, entering at each home's holder and
    through HAProxy."""
    holders = {h.name: await cluster.holder(h.name) for h in cluster.homes}
    assert all(holders.values()), holders
    async with httpx2.AsyncClient(timeout=60) as http:
        for home in cluster.homes:  # the holder caches the token (30 s) and knows the home
            primed = await call_status(
                http, cluster.instance(holders[home.name] or "").url, home.token
            )
            assert primed.kind == "ok", primed
    direct = {
        h.name: Load(cluster.instance(holders[h.name] or "").url, h.token, 1) for h in cluster.homes
    }
    through = Load(cluster.url, cluster.homes[0].token, 1)
    async with trio.open_nursery() as nursery:
        for calls in [*direct.values(), through]:
            nursery.start_soon(calls.run)
        assert cluster.postgres.child is not None
        await cluster.postgres.stop()
        down_at = trio.current_time()
        await trio.sleep(OUTAGE_S)  # the outage itself: a span of time, not a wait for an event
        up_at = trio.current_time()
        await cluster.restart_postgres()
        for calls in [*direct.values(), through]:
            calls.stop.set()
    for home, calls in direct.items():
        during = [o for o in calls.outcomes if down_at + 0.5 < o.at < up_at]
        assert during, f"no call to {home} ended while PostgreSQL was down"
        assert all(o.kind == "ok" for o in during), (
            home,
            [o.text for o in during if o.kind != "ok"],
        )
    assert not_in_words(through.outcomes) == [], "calls through HAProxy that did not end in words"
    for home in cluster.homes:  # the directory names the holders again, HAProxy serves all
        with trio.fail_after(RESYNC_S):
            await cluster.wait_holder(home.name, lambda h, want=holders[home.name]: h == want)
        async with httpx2.AsyncClient(timeout=60) as http:
            for _ in range(int(RESYNC_S / 0.5)):  # polled: caches and pools coming back
                outcome = await call_status(http, cluster.url, home.token)
                if outcome.kind == "ok":
                    break
                await trio.sleep(0.5)
        assert outcome.kind == "ok", (home.name, outcome)


def aborted_at_haproxy(root: Path) -> list[str]:
    """HAProxy's log lines (`option httplog`) whose termination state says the client or
    the server ended the request (`C...`, `S...`): what to read when a call through HAProxy
    did not end in words. A call HAProxy 2.6 ended by closing a kept-alive client connection
    with nothing said often has no line at all (docs/operations.md, "Many instances")."""
    log = root / "haproxy.log"
    lines = log.read_text(errors="replace").splitlines() if log.exists() else []
    return [line for line in lines if re.search(r" [CS][A-Za-z-]{3} ", line)][-20:]


async def roll_a_restart(cluster: Cluster) -> None:
    """Every instance in turn out of HAProxy (maint), stopped (SIGTERM: it drains), started
    again and put back, while every home is called through HAProxy (docs/operations.md,
    "Rolling a restart"): each call ends in words, and after each step every home answers."""
    loads = {h.name: Load(cluster.url, h.token, 1) for h in cluster.homes}
    async with trio.open_nursery() as nursery:
        for calls in loads.values():
            nursery.start_soon(calls.run)
        for made in cluster.instances:
            await cluster.set_instance_state(made.name, "maint")
            assert made.child is not None
            made.child.signal(signal.SIGTERM)
            with trio.fail_after(RECONNECT_S):
                status = await made.child.proc.wait()
            assert status == 0, f"{made.name} exited with {status} on SIGTERM"
            await cluster.restart_instance(made.name)
            await cluster.set_instance_state(made.name, "ready")
            back = trio.current_time()
            for home, calls in loads.items():
                with trio.move_on_after(RECONNECT_S):
                    await calls.ok_after(back)
                assert any(o.kind == "ok" and o.at > back for o in calls.outcomes), (
                    f"{home} did not answer within {RECONNECT_S:g} s of {made.name}'s restart"
                )
        for calls in loads.values():
            calls.stop.set()
    for home, calls in loads.items():
        assert not_in_words(calls.outcomes) == [], (
            f"calls to {home} that did not end in words; HAProxy's aborted requests:"
            f" {aborted_at_haproxy(cluster.root)}"
        )
    for made in cluster.instances:  # none left: HAProxy's own 503 is a JSON-RPC error in words
        await cluster.set_instance_state(made.name, "maint")
    async with httpx2.AsyncClient(timeout=60) as http:
        alone = await call_status(http, cluster.url, cluster.homes[0].token)
    assert alone.kind == "words" and "no bridge instance is ready" in alone.text, alone


async def tenants_keep_their_own_limits(cluster: Cluster) -> None:
    """Every connection comes through HAProxy; the limits key on the client HAProxy names in
    `X-Forwarded-For` (`option forwardfor`), which the instances believe (`trusted_proxies`):
    one tenant past its limit leaves the others theirs (docs/auth.md, "Limits that strangers
    cannot fill")."""

    async def register(address: str, times: int) -> list[int]:
        transport = httpx2.AsyncHTTPTransport(local_address=address)
        async with httpx2.AsyncClient(transport=transport, timeout=RECONNECT_S) as http:
            body = {"redirect_uris": ["http://127.0.0.1:9/callback"]}
            return [
                (await http.post(cluster.base + "/oauth/register", json=body)).status_code
                for _ in range(times)
            ]

    with trio.fail_after(RECONNECT_S):
        burst = REGISTER_ADDRESS_BURST
        assert await register("127.0.0.2", burst) == [201] * burst
        assert await register("127.0.0.2", 1) == [429]  # its own limit
        assert await register("127.0.0.3", 1) == [201]  # not one bucket for HAProxy's address


@needs_parts
async def test_kill_9_postgresql_restarted_and_a_rolling_restart_on_one_cluster() -> None:
    options = Options(port=0, stub_args=("--no-read-limit",))  # the load reads 20 times a second
    async with open_cluster(options) as cluster:
        root = str(cluster.root)
        await tenants_keep_their_own_limits(cluster)
        await cluster.restart_instance(await kill_the_holder(cluster))  # same id: claims freed
        await restart_postgres_under_load(cluster)
        await roll_a_restart(cluster)
    assert running_with(root) == [], "processes outlived the cluster"
