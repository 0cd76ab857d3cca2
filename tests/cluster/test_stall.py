"""A stalled instance (SIGSTOP, then SIGCONT) in a cluster of real processes: every call still
ends in words within its `call_deadline_s`, counted from the call's start
(`ftwbridge/mcp/deadline.py`, docs/operations.md "Faults").

- The home's holder stopped: a call entering at another instance is forwarded to it, gets no
  answer, and the entry ends it in words by the call's deadline (not at its HTTP client's
  read timeout, which counts from the send).
- An instance stopped while a call is at it, behind `make cluster`'s HAProxy configuration:
  nothing of the bridge can answer, and HAProxy's 504 in words comes by the deadline (not
  after its old 60 s `timeout server`).

The cluster runs with `call_deadline_s` 6 so that a stall shows in seconds. Processes:
`conftest.running_cluster`, shared by this module; every stopped process is continued in a
`finally`.
"""

from __future__ import annotations

import functools
import os
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest
import trio

from cluster import services
from cluster.procs import free_port
from tests.store.pgserver import PgServer

from .conftest import BOUND_S, Cluster, Instance, console, running_cluster
from .test_forwarding import CALL, _call_ok, _holder, _metric_is, _until, raw

DEADLINE_S = 6.0
"""The cluster's `call_deadline_s`."""


@pytest.fixture(scope="module")
def cluster(pg_server: PgServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """`running_cluster` with `call_deadline_s` `DEADLINE_S`, for this module."""
    settings = {"FTWBRIDGE_CALL_DEADLINE_S": str(DEADLINE_S)}
    with running_cluster(pg_server, tmp_path_factory.mktemp("stall"), settings) as made:
        yield made


class Stopped:
    """`inst` stopped with SIGSTOP for the `with` block, continued with SIGCONT after it."""

    def __init__(self, inst: Instance) -> None:
        assert inst.proc is not None
        self.pid = inst.proc.pid

    def __enter__(self) -> None:
        os.kill(self.pid, signal.SIGSTOP)

    def __exit__(self, *exc: object) -> None:
        os.kill(self.pid, signal.SIGCONT)


def in_words(answer: httpx2.Response) -> str:
    """The words an assistant reads in `answer`: a tool result's text or a JSON-RPC error's."""
    body = answer.json()
    if "result" in body:
        assert body["result"]["isError"] is True, body
        return str(body["result"]["content"][0]["text"])
    return str(body["error"]["message"])


async def test_a_call_forwarded_to_a_stopped_holder_ends_in_words_by_its_deadline(
    cluster: Cluster,
) -> None:
    token = cluster.tokens["a1"]
    holder = cluster.instances[await _holder(cluster, "h1")]
    entry = next(i for i in cluster.instances.values() if i is not holder)
    with trio.fail_after(BOUND_S):
        assert await _call_ok(entry.mcp, token)  # forwarded, and answered
    http = httpx2.AsyncClient(timeout=httpx2.Timeout(BOUND_S))  # made before the clock starts
    async with http:
        with Stopped(holder), trio.fail_after(BOUND_S):
            start = trio.current_time()
            answer = await raw(entry.mcp, token=token, body=CALL, http=http)
            took = trio.current_time() - start
    assert answer.status_code == 200, answer.text
    words = in_words(answer)
    assert words.startswith("E_UNAVAILABLE: ") and "did not answer in time" in words, words
    assert took < DEADLINE_S, took
    with trio.fail_after(BOUND_S):  # continued, the holder serves again
        await _until("calls succeed again", lambda: _call_ok(entry.mcp, token))


@pytest.mark.skipif(shutil.which("haproxy") is None, reason=services.NO_HAPROXY)
async def test_a_call_at_an_instance_stopped_behind_haproxy_ends_in_words_by_its_deadline(
    cluster: Cluster, tmp_path: Path
) -> None:
    """HAProxy's only server is the home's holder; a call waits there for the box (held at
    home), the holder is stopped, and HAProxy answers for it."""
    token = cluster.tokens["a1"]
    holder = cluster.instances[await _holder(cluster, "h1")]
    h1 = cluster.homes["h1"].console
    port = free_port()
    behind = services.Instance(
        holder.name,
        tmp_path,
        holder.port,
        holder.admin_port,
        holder.internal_port,
        settings={"call_deadline_s": DEADLINE_S},
    )
    cfg = services.write_haproxy(tmp_path, port, [behind])
    assert f"timeout server {round(DEADLINE_S * 1000)}ms" in cfg.read_text()
    url = f"http://127.0.0.1:{port}/mcp"
    public = {"host": cluster.env["FTWBRIDGE_PUBLIC_URL"].removeprefix("http://")}
    answers: list[tuple[float, httpx2.Response]] = []

    async def one_call() -> None:
        async with httpx2.AsyncClient(timeout=httpx2.Timeout(BOUND_S)) as http:
            start = trio.current_time()
            answer = await raw(url, token=token, body=CALL, headers=public, http=http)
            answers.append((trio.current_time() - start, answer))

    async def served() -> bool:
        answer = await raw(url, token=token, body=CALL, headers=public)
        return answer.status_code == 200 and answer.json()["result"].get("isError") is not True

    async with trio.open_nursery() as nursery:
        await services.start_haproxy(nursery, tmp_path, port, cfg)
        with trio.fail_after(BOUND_S):
            await _until("HAProxy serves", served)
        await trio.to_thread.run_sync(console, h1, {"op": "hold", "on": True})
        try:
            with trio.fail_after(BOUND_S):
                async with trio.open_nursery() as calls:
                    calls.start_soon(one_call)
                    line = "ftwbridge_calls_in_flight"
                    await _until(
                        "a call in flight", lambda: _metric_is(cluster, holder.name, line, 1)
                    )
                    with Stopped(holder):
                        await _until("the call answered", lambda: _answered(answers))
        finally:
            await trio.to_thread.run_sync(console, h1, {"op": "hold", "on": False})
        nursery.cancel_scope.cancel()
    ((took, answer),) = answers
    assert answer.status_code == 504, answer.text
    assert "did not answer in time" in in_words(answer)
    assert took < DEADLINE_S + 1.0, took  # HAProxy's bound counts from when it sent the call
    with trio.fail_after(BOUND_S):
        await _until("calls succeed again", lambda: _call_ok(holder.mcp, token))


async def _answered(answers: list[tuple[float, httpx2.Response]]) -> bool:
    return bool(answers)


async def test_the_keys_service_stopped_leaves_every_instance_in_the_balancer(
    cluster: Cluster,
) -> None:
    """The cluster's one keys service stopped for a few seconds: `/readyz` stays 200 at every
    instance and says what is degraded (a balancer taking them all out would end even the
    warm sessions, which need no keys service), and a warm call is still answered."""
    token = cluster.tokens["a1"]
    holder = cluster.instances[await _holder(cluster, "h1")]
    (keys,) = [p for p in cluster.procs if "keys" in p.args]  # type: ignore[operator]
    with trio.fail_after(BOUND_S):
        assert await _call_ok(holder.mcp, token)  # the session is warm
        os.kill(keys.pid, signal.SIGSTOP)
        try:
            async with httpx2.AsyncClient(timeout=httpx2.Timeout(BOUND_S)) as http:
                for inst in cluster.instances.values():
                    said = await http.get(inst.admin + "/readyz")
                    assert said.status_code == 200, (inst.name, said.text)
                    assert said.text.startswith("ready, degraded: the keys part"), said.text
            assert await _call_ok(holder.mcp, token)
        finally:
            os.kill(keys.pid, signal.SIGCONT)
        async with httpx2.AsyncClient(timeout=httpx2.Timeout(BOUND_S)) as http:
            await _until("ready again", lambda: _ready(http, holder.admin))


async def _ready(http: httpx2.AsyncClient, admin: str) -> bool:
    return (await http.get(admin + "/readyz")).text == "ready\n"


@pytest.mark.skipif(shutil.which("ss") is None, reason="iproute2's ss is not installed")
async def test_the_internal_listener_has_the_backlog_of_the_others(cluster: Cluster) -> None:
    """A burst of forwards from the other instances waits in a queue of `listen_backlog`
    (1024), not hypercorn's own 100."""
    from tests.test_backlog import _backlog

    for inst in cluster.instances.values():
        ports = (inst.port, inst.internal_port, inst.admin_port)
        assert [await trio.to_thread.run_sync(_backlog, p) for p in ports] == [1024] * 3


async def test_the_database_away_leaves_every_instance_in_the_balancer(cluster: Cluster) -> None:
    """The cluster's database refusing every connection for a few seconds (its sessions
    ended): `/readyz` stays 200 at every instance, saying the store does not answer, and a
    warm call at the home's holder is still answered (its token cached, its session in
    memory)."""
    from tests.store.test_bridge_on_postgres import _allow_connections

    token = cluster.tokens["a1"]
    holder = cluster.instances[await _holder(cluster, "h1")]
    with trio.fail_after(BOUND_S):
        assert await _call_ok(holder.mcp, token)  # warm, and its token cached
        await trio.to_thread.run_sync(_allow_connections, cluster.db_url, False)
        try:
            async with httpx2.AsyncClient(timeout=httpx2.Timeout(BOUND_S)) as http:
                for inst in cluster.instances.values():
                    said = await http.get(inst.admin + "/readyz")
                    assert said.status_code == 200, (inst.name, said.text)
                    assert said.text.startswith("ready, degraded: "), said.text
                    assert "does not answer" in said.text, said.text
            assert await _call_ok(holder.mcp, token)
        finally:
            await trio.to_thread.run_sync(_allow_connections, cluster.db_url, True)
        async with httpx2.AsyncClient(timeout=httpx2.Timeout(BOUND_S)) as http:
            for inst in cluster.instances.values():
                ready = functools.partial(_ready, http, inst.admin)
                await _until(f"{inst.name} ready again", ready)
        await _until("calls succeed again", lambda: _call_ok(holder.mcp, token))
