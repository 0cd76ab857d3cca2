"""The entry's coarse guard keys on the authenticated agent, never on the address: behind a
balancer every client has the balancer's address, and one bucket for all tenants would let one
agent's burst refuse every other (docs/operations.md, "Limits that strangers cannot fill").
A guard's refusal is audited as what it is (`status=guarded`), not as `forwarded`."""

from __future__ import annotations

import httpx2
import pytest

from ftwbridge.mcp.server import HttpRequest, McpService
from ftwbridge.store import TokenRecord
from tests.cluster.test_forwarder import B2, BODY, Directory, _forwarder
from tests.mcp.test_service import RESOURCE, FakeHomes

PROXY = "127.0.0.1"
"""Every request's TCP peer: the balancer in front."""


def _record(agent: str) -> TokenRecord:
    return TokenRecord("h1", agent, agent.encode() * 16, ("ftw.live.read",), RESOURCE, "c", 2**62)


async def test_agents_behind_one_proxy_have_guards_of_their_own(
    autojump_clock: object, caplog: pytest.LogCaptureFixture
) -> None:
    def ok(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, content=b"{}", headers={"content-type": "application/json"})

    records = {"t1": _record("a1"), "t2": _record("a2")}

    async def verify(token: str) -> TokenRecord | None:
        return records.get(token)

    svc = McpService(
        homes=FakeHomes(None),
        verify_token=verify,
        resource=RESOURCE,
        resource_metadata=RESOURCE + "-meta",
        max_body_bytes=1 << 20,
        call_deadline_s=5,
        wall_ms=lambda: 1000,
        mesh=_forwarder(Directory(B2), ok),  # its guard: a burst of 4
    )

    async def send(token: str) -> int:
        async def body() -> bytes:
            return BODY

        headers = {
            "content-type": ["application/json"],
            "accept": ["application/json"],
            "authorization": [f"Bearer {token}"],
        }
        resp = await svc.handle(HttpRequest("POST", headers, body, len(BODY), remote=PROXY))
        return resp.status

    assert [await send("t1") for _ in range(5)] == [200] * 4 + [429]
    caplog.set_level("INFO", logger="ftwbridge.audit")
    assert await send("t2") == 200  # another agent at the same address: its own guard
    assert await send("t1") == 429
    lines = [r.getMessage() for r in caplog.records if r.name == "ftwbridge.audit"]
    assert "agent=a1" in lines[-1] and "status=guarded" in lines[-1] and "http=429" in lines[-1]
