"""Words that must not mislead: each refusal sentence against the situation
that produces it, the driver check without `src`, and an unsupported protocol version in the
modern envelope."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from ftwbridge.mcp.inbound import Rejection, classify
from ftwbridge.mcp.tools import TOOLS_BY_NAME
from ftwbridge.mcp.words import sentence
from ftwbridge.proto.names import Read
from ftwbridge.proto.session import Reply
from tests.e2e.env import Env

from .test_service import RECORD, FakeHomes, call, post, service


@pytest.mark.parametrize(
    ("code", "args", "says", "never"),
    [
        # pool.py: the home's `sessions_per_home` is full; the assistant asked for nothing more
        (
            "E_CAP_EXCEEDED",
            {"cap": "sessions", "max": 16, "asked": 17},
            "already has 16 assistant sessions open",
            "more than this assistant may",
        ),
        (
            "E_CAP_EXCEEDED",
            {"cap": "history_days", "max": 30, "asked": 31},
            "at most 30 days, asked 31",
            "sessions",
        ),
        (
            "E_CAP_EXCEEDED",
            {"cap": "history_series", "max": 16, "asked": 17},
            "17 series at once; the home sends at most 16",
            "this assistant",
        ),
        # a paging cursor the box did not give: not "did not understand this request"
        ("E_UNKNOWN_OP", {"arg": "before"}, "does not know that before cursor", "understand"),
        # the stub box refuses a malformed hist.query this way: not only "unknown"
        (
            "E_UNKNOWN_OP",
            {"t": "hist.query", "field": "series"},
            "did not accept the request hist.query (its series)",
            "understand",
        ),
        # part E: a charger another party holds is not a lasting change
        (
            "E_NEEDS_OWNER",
            {"op": "loadpoint.hold", "why": "held"},
            "Someone else holds that charger",
            "lasting",
        ),
        (
            "E_NEEDS_OWNER",
            {"op": "site.mode.set", "why": "durable"},
            "lasting change such as site.mode.set",
            "holds",
        ),
        ("E_NOT_FOUND", {"what": "src", "id": "nope"}, "no driver or device called 'nope'", "src"),
        ("E_RANGE_TOO_LARGE", {"maxMs": 30 * 86_400_000}, "at most 30 days", "?"),
        # session ends the pool passes on as E_UNAVAILABLE {reason}
        ("E_UNAVAILABLE", {"reason": "closed"}, "closed during the call", "Part of the home"),
        ("E_UNAVAILABLE", {"reason": "box_shutdown"}, "shutting down", "Part of the home"),
        ("E_UNAVAILABLE", {"reason": "epoch_changed"}, "restarted", "Part of the home"),
        ("E_RATE_LIMITED", {"retryAfterMs": 1500}, "try again in 2 s", "answering"),
    ],
)
def test_each_sentence_fits_its_situation(
    code: str, args: dict[str, Any], says: str, never: str
) -> None:
    text = sentence(code, args, args.get("retryAfterMs"))
    assert says in text and never not in text, text


def test_the_driver_check_without_src_names_the_drivers_instead() -> None:
    spec = TOOLS_BY_NAME["diag_run"]
    bare = spec.args.model_validate({"check": "driver"})
    assert spec.box_requests(bare, 0) == [(Read.DRIVERS_GET, None)]
    named = spec.args.model_validate({"check": "driver", "src": "meter.p1"})
    assert spec.box_requests(named, 0) == [(Read.DIAG_RUN, {"check": "driver", "src": "meter.p1"})]
    assert spec.box_requests(spec.args.model_validate({"check": "clock"}), 0) == [
        (Read.DIAG_RUN, {"check": "clock"})
    ]
    assert set(spec.scopes) == {"ftw.health.read"}  # reading drivers needs no other scope


async def test_diag_run_driver_without_src_through_the_service() -> None:
    drivers = {"drivers": [{"name": "meter.p1", "kind": "meter"}, {"name": "pv.sma"}]}
    record = dataclasses.replace(RECORD, scopes=("ftw.health.read",))
    svc = service(Reply(1, "drivers", drivers), record=record)
    homes = svc._homes
    assert isinstance(homes, FakeHomes)
    status, out = await post(svc, *call("diag_run", {"check": "driver"}))
    result = out["result"]
    assert status == 200 and homes.calls == [Read.DRIVERS_GET]
    details = result["structuredContent"]["details"]
    assert result["structuredContent"]["result"] == "needs_src"
    assert details["drivers"] == ["meter.p1", "pv.sma"]
    assert "needs src" in details["message"] and "meter.p1, pv.sma" in details["message"]
    assert "not exist" not in json.dumps(result) and "no check" not in json.dumps(result)


async def test_diag_run_driver_without_src_at_a_stub_home(env: Env) -> None:
    from tests.e2e.test_access import post_call

    home = await env.add_home("h1")
    _key, _agent, token = await env.agent(home)
    listed = await post_call(env, token, "drivers_status")
    names = [d["name"] for d in listed.json()["result"]["structuredContent"]["drivers"]]
    r = await post_call(env, token, "diag_run", {"check": "driver"})
    result = r.json()["result"]
    assert not result.get("isError") and result["structuredContent"]["details"]["drivers"] == names
    assert ", ".join(names) in result["structuredContent"]["details"]["message"]
    again = await post_call(env, token, "diag_run", {"check": "driver", "src": names[0]})
    assert again.json()["result"]["structuredContent"]["result"] in ("pass", "warn")


def test_an_unknown_version_in_the_modern_envelope_lists_ours() -> None:
    """A client of a later revision may shape `_meta` otherwise: the answer is about the
    version, with the versions we serve, not about `_meta`."""
    raw = json.dumps({"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {}}).encode()
    for named in ("2031-01-01", "=?base64?MjAzMS0wMS0wMQ==?="):
        r = classify({"mcp-protocol-version": [named], "mcp-method": ["tools/list"]}, raw)
        assert isinstance(r, Rejection) and (r.status, r.code, r.id) == (400, -32022, 3)
        assert "_meta must" not in r.message and "2031-01-01" in r.message
        assert "2026-07-28" in r.message and "2025-11-25" in r.message
        assert r.data == {"supported": ["2026-07-28"], "requested": "2031-01-01"}
    old = classify({"mcp-protocol-version": ["2024-11-05"]}, raw)
    assert isinstance(old, Rejection) and "2026-07-28" in old.message
