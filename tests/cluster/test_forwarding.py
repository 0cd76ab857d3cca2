"""Forwarding across a cluster of real processes (issue 13 items 4 and 7): calls entering at
an instance that does not hold the home are answered by the holder, in both MCP eras; the
internal listener refuses what is not properly signed; a takeover moves a home; a revocation
holds at every instance at once. Processes: `conftest.cluster` (shared by the module)."""

from __future__ import annotations

import json
from typing import Any

import httpx2
import trio

from ftwbridge.mesh import signing

from .conftest import BOUND_S, Cluster

Era = str


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
) -> httpx2.Response:
    """One POST of a `tools/list` (or `body`) to `url`, sent raw."""
    sent = {"content-type": "application/json", "accept": "application/json"}
    sent["mcp-protocol-version"] = "2025-11-25"
    if token is not None:
        sent["authorization"] = f"Bearer {token}"
    sent.update(headers or {})
    data = body if body is not None else b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}'
    async with httpx2.AsyncClient(timeout=httpx2.Timeout(BOUND_S)) as http:
        return await http.post(url, headers=sent, content=data)


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
    cluster: Cluster, to: str, epoch: int, body: bytes, *, now_ms: int, key: bytes | None = None
) -> dict[str, str]:
    return signing.sign(
        key or cluster.mesh_key,
        sender="b-2",
        method="POST",
        path="/mcp",
        to=to,
        epoch=epoch,
        body=body,
        now_ms=now_ms,
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
        cases = {
            "unsigned": {},
            "replayed": good,
            "forged": _signed(cluster, "b-1", epoch, body, now_ms=now, key=bytes(32)),
            "stale": _signed(cluster, "b-1", epoch, body, now_ms=now - 31_000),
            "misaddressed": _signed(cluster, "b-3", epoch, body, now_ms=now),
        }
        for reason, headers in cases.items():
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
            headers=_signed(cluster, "b-1", epoch, body, now_ms=now),
        )
        assert bad.status_code == 401, bad.text
        # a client cannot pass mesh headers through the main listener to make it a forward
        through = await raw(cluster.instances["b-2"].mcp, token=token, headers=good, body=body)
        assert through.status_code == 200, through.text
        assert json.loads(through.text)["result"]["tools"]
