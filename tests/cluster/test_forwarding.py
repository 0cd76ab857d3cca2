"""Forwarding across a cluster of real processes: calls entering at
an instance that does not hold the home are answered by the holder, in both MCP eras; the
internal listener refuses what is not properly signed; a takeover moves a home; a revocation
holds at every instance at once. Processes: `running_cluster`, shared by the module, with
per-agent limits it cannot reach (`WIDE`)."""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
import trio

from ftwbridge.mesh import signing
from tests.store.pgserver import PgServer

from .conftest import BOUND_S, Cluster, running_cluster

Era = str

# An agent's requests here reach 40 at its holder within a test (each `call_status` opens a
# client: initialize, its notification, tools/list, the call); the default limit (a burst of
# 30, then 10 a second) made the first test's pass depend on how fast the machine ran it
# (a 429 in one full run). Forwarding is this module's subject, not the per-agent limit
# (tests/cluster/test_guard_principal.py and tests/edge test that), so its limit is wide.
WIDE = {"FTWBRIDGE_HTTP_BURST": "10000", "FTWBRIDGE_HTTP_PER_S": "10000"}


@pytest.fixture(scope="module")
def cluster(pg_server: PgServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """`running_cluster` for this module, with per-agent HTTP limits it cannot reach."""
    folder: Path = tmp_path_factory.mktemp("cluster")
    with running_cluster(pg_server, folder, WIDE) as made:
        yield made


async def call_status(url: str, token: str, mode: Era) -> Any:
    """One `status` call by the official `mcp` client in `mode` (`2026-07-28` or `legacy`)."""
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    http = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(BOUND_S)
    )
    async with http, Client(streamable_http_client(url, http_client=http), mode=mode) as c:
        return await c.call_tool("status", {})


async def raw(
    url: str,
    *,
    token: str | None = None,
    headers: dict[str, str] | None = None,
    body: bytes | None = None,
    http: httpx2.AsyncClient | None = None,
) -> httpx2.Response:
    """One POST of a `tools/list` (or `body`) to `url`, sent raw, by `http` or by a client of
    its own (whose making costs about a quarter of a second of CPU: a test that times the
    call passes one made before)."""
    sent = base_headers(token)
    sent.update(headers or {})
    data = body if body is not None else b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}'
    if http is not None:
        return await http.post(url, headers=sent, content=data)
    async with httpx2.AsyncClient(timeout=httpx2.Timeout(BOUND_S)) as own:
        return await own.post(url, headers=sent, content=data)


def base_headers(token: str | None) -> dict[str, str]:
    """The headers `raw` sends besides the mesh's (those `_signed` covers)."""
    sent = {"content-type": "application/json", "accept": "application/json"}
    sent["mcp-protocol-version"] = "2025-11-25"
    if token is not None:
        sent["authorization"] = f"Bearer {token}"
    return sent


async def metric(cluster: Cluster, name: str, line: str) -> float:
    """The value of one metric line of instance `name`'s `/metrics` (0 when absent)."""
    async with httpx2.AsyncClient(timeout=httpx2.Timeout(BOUND_S)) as http:
        text = (await http.get(cluster.instances[name].admin + "/metrics")).text
    for row in text.splitlines():
        if row.startswith(line + " "):
            return float(row.rsplit(" ", 1)[1])
    return 0.0


async def test_a_call_entering_elsewhere_is_answered_by_the_holder(cluster: Cluster) -> None:
    b1, b2, b3 = cluster.instances.values()
    token = cluster.tokens["a1"]
    with trio.fail_after(BOUND_S):
        for mode in ("2026-07-28", "legacy"):
            direct = await call_status(b1.mcp, token, mode)
            assert not direct.is_error, direct
            for entry in (b2, b3):
                forwarded = await call_status(entry.mcp, token, mode)
                assert _same(forwarded) == _same(direct)
        # it was the holder that answered: the entries forwarded, b-1 answered its box reads
        assert (
            await metric(
                cluster,
                "b-2",
                'ftwbridge_mcp_requests_total{method="tools/call",outcome="forwarded"}',
            )
            >= 2
        )
        assert (
            await metric(cluster, "b-2", 'ftwbridge_tool_calls_total{outcome="ok",tool="status"}')
            == 0
        )
        assert (
            await metric(cluster, "b-1", 'ftwbridge_tool_calls_total{outcome="ok",tool="status"}')
            >= 6
        )
        # the entries know the holder in memory: no database lookup for a forwarded call
        lookups = "ftwbridge_mesh_holder_lookups_total"
        before = {entry.name: await metric(cluster, entry.name, lookups) for entry in (b2, b3)}
        for _ in range(5):
            for entry in (b2, b3):
                assert not (await call_status(entry.mcp, token, "2026-07-28")).is_error
        for entry in (b2, b3):
            assert await metric(cluster, entry.name, lookups) == before[entry.name]
            assert await metric(cluster, entry.name, "ftwbridge_mesh_holders_known") >= 1


async def test_a_listen_entering_elsewhere_is_served_by_the_holder(cluster: Cluster) -> None:
    """One forwarded stream (docs/live.md, "Many instances"), with the official client."""
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.client.subscriptions import ResourceUpdated

    from ftwbridge.mcp.listen_rules import live_uri

    _b1, b2, _b3 = cluster.instances.values()
    uri = live_uri("h1")
    http = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {cluster.tokens['a1']}"},
        timeout=httpx2.Timeout(BOUND_S),
    )
    with trio.fail_after(BOUND_S):
        async with (
            http,
            Client(streamable_http_client(b2.mcp, http_client=http), mode="2026-07-28") as c,
            c.listen(resource_subscriptions=[uri]) as sub,
        ):
            assert sub.honored.resource_subscriptions == [uri]
            assert isinstance(await sub.__anext__(), ResourceUpdated)
            assert await metric(cluster, "b-1", "ftwbridge_listen_streams") == 1  # the holder
            assert await metric(cluster, "b-2", "ftwbridge_listen_streams") == 0
        line = 'ftwbridge_mcp_requests_total{method="subscriptions/listen",outcome="forwarded"}'
        assert await metric(cluster, "b-2", line) >= 1
        # the client's close reaches the holder through the entry: another process's doing
        while await metric(cluster, "b-1", "ftwbridge_listen_streams") != 0:  # noqa: ASYNC110
            await trio.sleep(0.2)


def _same(result: Any) -> Any:
    """A `status` result without the box's uptime and its sources' last readings (ms of
    uptime), the figures that move between two reads of a home whose clock is frozen."""
    dumped = result.model_dump()
    dumped["structured_content"].pop("uptimeMs")
    for source in dumped["structured_content"]["sources"].values():
        source.pop("lastOkMs")
    dumped["content"] = len(dumped["content"])
    return dumped


def _signed(
    cluster: Cluster,
    to: str,
    epoch: int,
    body: bytes,
    *,
    now_ms: int,
    key: bytes | None = None,
    token: str | None = None,
) -> dict[str, str]:
    """The mesh headers for `raw`'s request with `token`, covering its other headers."""
    token = token if token is not None else cluster.tokens["a1"]
    return signing.sign(
        key or cluster.mesh_key,
        sender="b-2",
        method="POST",
        path="/mcp",
        to=to,
        epoch=epoch,
        body=body,
        now_ms=now_ms,
        headers=list(base_headers(token).items()),
    )


async def _epoch(cluster: Cluster, home: str) -> int:
    import psycopg

    def read() -> int:
        with psycopg.connect(cluster.db_url) as db:
            row = db.execute("SELECT epoch FROM uplinks WHERE home = %s", (home,)).fetchone()
            assert row is not None
            return int(row[0])

    return await trio.to_thread.run_sync(read)


async def test_the_internal_listener_refuses_what_is_not_signed_right(cluster: Cluster) -> None:
    import time

    b1 = cluster.instances["b-1"]
    token = cluster.tokens["a1"]
    body = b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}'
    now = time.time_ns() // 1_000_000
    with trio.fail_after(BOUND_S):
        epoch = await _epoch(cluster, "h1")
        good = _signed(cluster, "b-1", epoch, body, now_ms=now)
        answered = await raw(b1.internal, token=token, headers=good, body=body)
        assert answered.status_code == 200, answered.text
        assert len(answered.json()["result"]["tools"]) > 3
        cases = [
            ("unsigned", {}),
            ("replayed", good),
            ("forged", _signed(cluster, "b-1", epoch, body, now_ms=now, key=bytes(32))),
            ("stale", _signed(cluster, "b-1", epoch, body, now_ms=now - 31_000)),
            ("misaddressed", _signed(cluster, "b-3", epoch, body, now_ms=now)),
            # signed for another bearer token: the header the holder acts on is covered
            ("forged", _signed(cluster, "b-1", epoch, body, now_ms=now, token="other-token")),
        ]
        for reason, headers in cases:
            refused = await raw(b1.internal, token=token, headers=headers, body=body)
            assert refused.status_code == 403, (reason, refused.text)
            words = refused.json()["error"]["message"]
            assert words.startswith("Forwarded request refused: "), words
            assert cluster.mesh_key.hex() not in refused.text and token not in refused.text
            line = f'ftwbridge_mesh_refused_total{{reason="{reason}"}}'
            assert await metric(cluster, "b-1", line) >= 1, reason
        # signed right but for a past epoch: 421 with the mesh's own header, for the sender
        moved = await raw(
            b1.internal,
            token=token,
            body=body,
            headers=_signed(cluster, "b-1", epoch - 1, body, now_ms=now),
        )
        assert moved.status_code == 421 and moved.headers.get("ftw-mesh-moved") == "1"
        # the token is checked again in full at the holder
        bad = await raw(
            b1.internal,
            token="not-a-token",
            body=body,
            headers=_signed(cluster, "b-1", epoch, body, now_ms=now, token="not-a-token"),
        )
        assert bad.status_code == 401, bad.text
        # a header added on the way, not covered, is never read: this one would be refused
        # (-32020, the body calls no tool) if the holder read it
        added = _signed(cluster, "b-1", epoch, body, now_ms=now) | {"mcp-method": "tools/call"}
        answered = await raw(b1.internal, token=token, body=body, headers=added)
        assert answered.status_code == 200, answered.text
        # a client cannot pass mesh headers through the main listener to make it a forward
        through = await raw(cluster.instances["b-2"].mcp, token=token, headers=good, body=body)
        assert through.status_code == 200, through.text
        assert json.loads(through.text)["result"]["tools"]


def _hostile(port: int, data: bytes) -> bytes:
    """Send `data` raw to 127.0.0.1:`port`; everything answered until the server closes."""
    import socket

    from tests.edge.live import read_until_closed

    with socket.create_connection(("127.0.0.1", port), timeout=BOUND_S) as sock:
        sock.sendall(data)
        return read_until_closed(sock)


async def test_the_internal_listener_runs_behind_the_edge_guard(cluster: Cluster) -> None:
    """Bytes that stopped a whole hypercorn process (an upgrade request and a byte at once;
    HINTS.md, "The edge") end that connection alone here too, and the instance serves on."""
    from tests.edge.live import WS_UPGRADE

    b1 = cluster.instances["b-1"]
    upgrade = WS_UPGRADE.format(path="/mcp", host="127.0.0.1").encode()
    with trio.fail_after(BOUND_S):
        for data in (
            upgrade + b"x",
            b"POST /mcp HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
        ):
            answer = await trio.to_thread.run_sync(_hostile, b1.internal_port, data)
            assert not answer.startswith(b"HTTP/1.1 5"), answer[:80]
        assert b1.proc is not None and b1.proc.poll() is None
        assert (await raw(b1.internal, token=cluster.tokens["a1"])).status_code == 403
        assert (await raw(b1.mcp, token=cluster.tokens["a1"])).status_code == 200


async def _until(what: str, check: Any) -> None:
    """Wait until the awaitable-returning `check()` is true, asking every 0.1 s (another
    process's state: nothing here can announce it), within `BOUND_S`."""
    for _attempt in range(int(BOUND_S * 10)):
        if await check():
            return
        await trio.sleep(0.1)
    raise AssertionError(f"not within {BOUND_S:g} s: {what}")


async def _raw_box(cluster: Cluster, door: str, home: str, *, task_status: Any) -> None:
    """An uplink for `home` that authenticates (the stub's key, from its seed) and then only
    listens, as a box that came back at another instance while its old uplink lingers.
    Reports started once authenticated; returns at the Close, asserting it is 4409."""
    from urllib.parse import urlsplit

    from nacl.signing import SigningKey
    from trio_websocket import ConnectionClosed, wrap_client_stream

    from ftwbridge.proto.door import door_signature
    from ftwbridge.proto.envelope import Envelope, decode_envelope
    from ftwbridge.proto.registry import Msg
    from stubbox.owner import derive_key

    key = SigningKey(derive_key(home, "home"))
    where = urlsplit(door)
    assert where.hostname is not None and where.port is not None
    # the stream is ours, so it is closed here whatever the WebSocket library does
    stream = await trio.open_tcp_stream(where.hostname, where.port)
    async with stream, trio.open_nursery() as nursery:
        ws = await wrap_client_stream(nursery, stream, where.hostname, where.path)
        challenge = decode_envelope(bytes(await ws.get_message()))  # type: ignore[arg-type]
        assert isinstance(challenge.b, dict)
        sig = door_signature(key, challenge.b["nonce"], home)
        await ws.send_message(
            Envelope(Msg.DOOR_HELLO, None, {"home": home, "build": "test", "sig": sig}).encode()
        )
        task_status.started()
        try:
            while True:
                await ws.get_message()
        except ConnectionClosed as exc:
            assert exc.reason.code == 4409, exc.reason
        await ws.aclose()


async def test_a_box_that_reconnects_elsewhere_takes_its_home_over(cluster: Cluster) -> None:
    b1, b2, b3 = cluster.instances.values()
    token = cluster.tokens["a1"]
    before = await _epoch(cluster, "h1")
    taken = "ftwbridge_door_takeovers_total"
    with trio.fail_after(BOUND_S):
        async with trio.open_nursery() as nursery:
            # the box's uplink to b-1 lingers while the box authenticates at b-2
            await nursery.start(_raw_box, cluster, b2.door, "h1")
            # b-1 hears the takeover and closes its uplink (4409): the stub box sees it
            # lost and dials the next door of its list, b-2, which it then holds
            await _until("b-1 closed", lambda: _metric_is(cluster, "b-1", taken, 1))
            await _until(
                "b-1 has no uplink",
                lambda: _metric_is(cluster, "b-1", "ftwbridge_uplinks", 0, exact=True),
            )
        # b-2 claims the home for the stub only after the raw uplink's Close came back, so
        # that claim may still be on its way to the database when the raw box has returned
        await _until("the stub's claim at b-2", lambda: _epoch_past(cluster, before + 1))
        status = await cluster_console_status(cluster)
        assert status["uplinks"] == 2 and status["connected"]
        for entry in (b1, b2, b3):  # reachable on the next call, wherever it enters
            result = await call_status(entry.mcp, token, "2026-07-28")
            assert not result.is_error, result
        assert (
            await metric(cluster, "b-2", 'ftwbridge_tool_calls_total{outcome="ok",tool="status"}')
            >= 3
        )


async def _epoch_past(cluster: Cluster, epoch: int) -> bool:
    """Whether h1's epoch in the directory is past `epoch` (a later claim was written)."""
    return await _epoch(cluster, "h1") > epoch


async def cluster_console_status(cluster: Cluster) -> Any:
    from .conftest import console

    return await trio.to_thread.run_sync(console, cluster.homes["h1"].console, {"op": "status"})


async def _metric_is(
    cluster: Cluster, name: str, line: str, value: float, *, exact: bool = False
) -> bool:
    got = await metric(cluster, name, line)
    return got == value if exact else got >= value


async def test_a_revocation_holds_at_every_instance_at_once(cluster: Cluster) -> None:
    from .conftest import console

    token = cluster.tokens["a2"]
    with trio.fail_after(BOUND_S):
        for inst in cluster.instances.values():  # each has the token in its cache now
            assert (await raw(inst.mcp, token=token)).status_code == 200
        drop = {"op": "drop_agent", "key": cluster.agent_keys["a2"]}
        await trio.to_thread.run_sync(console, cluster.homes["h1"].console, drop)
    # the token cache would honour it for 30 s: within 10 s every instance refuses it
    with trio.fail_after(10):
        for inst in cluster.instances.values():
            await _until(inst.name, functools.partial(_refused, inst.mcp, token))


async def _refused(url: str, token: str) -> bool:
    answer = await raw(url, token=token)
    if answer.status_code != 401:
        return False
    assert "withdrawn" in answer.headers["www-authenticate"], answer.headers
    return True


async def test_an_agent_approved_later_is_served_wherever_it_enters(cluster: Cluster) -> None:
    """Every entry has read the home's roster by now; the owner's newer one (another
    instance took it from the box) reaches their token checks through its event."""
    from .conftest import grant

    await trio.to_thread.run_sync(grant, cluster, "h1", "a3")
    with trio.fail_after(BOUND_S):
        for inst in cluster.instances.values():
            result = await call_status(inst.mcp, cluster.tokens["a3"], "2026-07-28")
            assert not result.is_error, (inst.name, result)


CALL = b'{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"status","arguments":{}}}'


async def _holder(cluster: Cluster, home: str) -> str:
    import psycopg

    def read() -> str:
        with psycopg.connect(cluster.db_url) as db:
            row = db.execute("SELECT instance_id FROM uplinks WHERE home = %s", (home,)).fetchone()
            assert row is not None and row[0] is not None
            return str(row[0])

    return await trio.to_thread.run_sync(read)


async def _call_ok(url: str, token: str) -> bool:
    answer = await raw(url, token=token, body=CALL)
    assert answer.status_code == 200, answer.text
    return answer.json()["result"].get("isError") is not True


async def test_calls_at_a_holder_killed_end_in_words_and_the_box_redials(
    cluster: Cluster,
) -> None:
    """Last in the module: it kills an instance. The calls must reach the box on a session
    already open: with the box holding, a new session's handshake is never answered. So one
    call first opens it, or renews it (a session idle for `idle_close_s`, 60 s, is closed,
    and the tests before this one can take that long on a loaded machine)."""
    from .conftest import console

    token = cluster.tokens["a1"]
    h1 = cluster.homes["h1"].console
    holder = cluster.instances[await _holder(cluster, "h1")]
    entry = next(i for i in cluster.instances.values() if i is not holder)
    answers: list[tuple[float, httpx2.Response]] = []  # (trio time it ended, answer)
    killed_at = 0.0

    async def one_call() -> None:
        answer = await raw(entry.mcp, token=token, body=CALL)
        answers.append((trio.current_time(), answer))

    with trio.fail_after(BOUND_S):
        assert await _call_ok(entry.mcp, token)  # the session at the holder, open and fresh
    await trio.to_thread.run_sync(console, h1, {"op": "hold", "on": True})
    try:
        with trio.fail_after(BOUND_S):
            async with trio.open_nursery() as nursery:
                for _ in range(3):
                    nursery.start_soon(one_call)
                line = "ftwbridge_calls_in_flight"
                await _until("a call in flight", lambda: _metric_is(cluster, holder.name, line, 1))
                assert holder.proc is not None
                holder.proc.kill()  # SIGKILL
                killed_at = trio.current_time()
    finally:
        await trio.to_thread.run_sync(console, h1, {"op": "hold", "on": False})
    assert len(answers) == 3
    for ended, answer in answers:
        after_s = ended - killed_at
        assert after_s > 0, ("answered before the kill", answer.text)
        # in words, as a tool result, well before the call's 25 s deadline would have ended it
        assert answer.status_code == 200, answer.text
        result = answer.json()["result"]
        assert result["isError"] is True, result
        words = result["content"][0]["text"]
        assert words.startswith("E_UNAVAILABLE: "), words
        assert after_s < 20, (after_s, words)
    assert any(
        "stopped while answering" in a.json()["result"]["content"][0]["text"] for _, a in answers
    )
    # the box redials the next door of its list; calls succeed again, wherever they enter
    await _until("calls succeed again", functools.partial(_call_ok, entry.mcp, token))
    for inst in cluster.instances.values():
        if inst is not holder:
            assert await _call_ok(inst.mcp, token), inst.name
            assert await _metric_is(cluster, inst.name, "ftwbridge_calls_in_flight", 0, exact=True)
