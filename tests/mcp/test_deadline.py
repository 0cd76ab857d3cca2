"""A call's deadline counts from its start (`ftwbridge/mcp/deadline.py`), on trio's MockClock:
time spent before the box reads (a slow token check) comes out of the reads' time, a request
still under way at the deadline ends in words, and a forwarded request gets only the budget
its sender left it."""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio

from ftwbridge.mcp import deadline
from ftwbridge.mcp.server import HttpRequest, McpService
from ftwbridge.proto.names import Read
from ftwbridge.proto.roster import AgentGrant
from ftwbridge.proto.session import Reply
from ftwbridge.store import TokenRecord

from .test_service import GRANT, RECORD, RESOURCE, call

DEADLINE_S = 5.0


class Frozen:
    """A home whose box never answers (a stalled box, or a holder stopped with SIGSTOP)."""

    async def call(self, home: str, agent_key: bytes, read: Read, body: Any) -> Reply:
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    async def grant(self, home: str, agent_key: bytes) -> AgentGrant | None:
        return GRANT


class Holds:
    """The mesh port of the instance holding every home (at every epoch): nothing is
    forwarded."""

    async def holds(self, home: str, epoch: int) -> bool:
        return True

    async def forward(self, *args: Any) -> None:
        return None


def frozen_service(check_s: float) -> McpService:
    async def verify(token: str) -> TokenRecord | None:
        await trio.sleep(check_s)  # the database slow to look the token up
        return RECORD

    return McpService(
        homes=Frozen(),
        verify_token=verify,
        resource=RESOURCE,
        resource_metadata=RESOURCE + "-meta",
        max_body_bytes=1 << 20,
        call_deadline_s=DEADLINE_S,
        wall_ms=lambda: 1000,
        mesh=Holds(),  # type: ignore[arg-type]
    )


async def status_call(svc: McpService, **extra: Any) -> tuple[float, int, Any]:
    """A `status` call; returns (seconds it took, HTTP status, JSON body)."""
    body, headers = call("status", {})
    data = json.dumps(body).encode()
    hs = {k: [v] for k, v in headers.items()}
    hs |= {"content-type": ["application/json"], "authorization": ["Bearer good"]}

    async def read() -> bytes:
        return data

    start = trio.current_time()
    resp = await svc.handle(HttpRequest("POST", hs, read, len(data), **extra))
    return trio.current_time() - start, resp.status, json.loads(resp.body)


async def test_time_before_the_reads_comes_out_of_the_deadline(
    autojump_clock: trio.abc.Clock,
) -> None:
    took, status, body = await status_call(frozen_service(check_s=2.0))
    assert status == 200 and body["result"]["isError"] is True
    assert "took too long" in body["result"]["content"][0]["text"]
    # the start plus the deadline, less the margin to write the words; not 2 s + 5 s
    assert took == pytest.approx(DEADLINE_S - deadline.answer_margin_s(DEADLINE_S))


async def test_a_request_still_under_way_at_its_deadline_ends_in_words(
    autojump_clock: trio.abc.Clock,
) -> None:
    with trio.fail_after(60):
        took, status, body = await status_call(frozen_service(check_s=3600.0))
    assert took == pytest.approx(DEADLINE_S)
    assert status == 503 and body["error"]["message"].startswith("The bridge could not finish")


async def test_a_forwarded_call_gets_the_budget_its_sender_left(
    autojump_clock: trio.abc.Clock,
) -> None:
    svc = frozen_service(check_s=0.0)
    took, _, body = await status_call(svc, mesh_epoch=3, budget_s=2.0)
    assert "took too long" in body["result"]["content"][0]["text"]
    assert took == pytest.approx(2.0 - deadline.answer_margin_s(DEADLINE_S))
    took, _, _ = await status_call(svc, mesh_epoch=3, budget_s=3600.0)  # never lengthened
    assert took == pytest.approx(DEADLINE_S - deadline.answer_margin_s(DEADLINE_S))


@pytest.mark.parametrize(
    ("values", "seconds"),
    [
        (None, None),
        ([], None),
        (["1500"], 1.5),
        ([" 0 "], 0.0),
        (["-1"], None),
        (["1e3"], None),
        (["\u0661\u0662"], None),  # Arabic-Indic digits: `int` would take them
        (["1", "2"], None),
        (["9" * 10], None),
    ],
)
def test_a_budget_header_is_ascii_ms_or_ignored(
    values: list[str] | None, seconds: float | None
) -> None:
    assert deadline.parse_budget(values) == seconds


def test_the_hop_keeps_time_for_the_way_back() -> None:
    assert deadline.hop_budget_ms(10.0, 2.0) == 7500
    assert deadline.hop_budget_ms(10.0, 9.8) == 0
    assert deadline.hop_budget_ms(float("inf"), 0.0) == deadline.BUDGET_MAX_MS
