"""What an operator sees (docs/operations.md, "Logs", "Metrics and health"), over real sockets.

- every request that reaches `/mcp` leaves one audit line and one `ftwbridge_mcp_requests_total`
  sample, refusals included, and values that only grow are Prometheus counters;
- uplinks refused at the door are counted by reason and logged, at most once a minute per home;
- `ftwbridge home enroll` with a new key for a home reaches the running bridge at once;
- a box that came back with an older roster gets its assistants refused in words at once.

Waits on another process (a stub home, the command line's write) are bounded by
`REAL_WAIT_S`; the few that look at the bridge's state again and again do so every 50 ms.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

import httpx2
import pytest
import trio
from prometheus_client.parser import text_string_to_metric_families
from trio_websocket import ConnectionClosed, open_websocket_url

from devtools.rig import console, start_stub
from ftwbridge.admin import enroll
from ftwbridge.proto.door import CLOSE_BAD_SIGNATURE, CLOSE_UNKNOWN_HOME
from ftwbridge.proto.envelope import decode_envelope
from ftwbridge.proto.roster import verify_roster
from stubbox.owner import Owner

from .env import REAL_WAIT_S, Env
from .test_access import MODERN, call_body, post_call
from .test_door import hello


async def _until(check: Callable[[], bool]) -> None:
    with trio.fail_after(REAL_WAIT_S):
        while not check():  # noqa: ASYNC110 - another process's doing, bounded
            await trio.sleep(0.05)


async def _metrics(env: Env) -> dict[str, Any]:
    async with httpx2.AsyncClient() as http:
        text = (await http.get(f"{env.bridge.admin_url}/metrics")).text
    return {f.name: f for f in text_string_to_metric_families(text)}


def _value(families: dict[str, Any], family: str, sample: str, **labels: str) -> float:
    for s in families[family].samples:
        if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items()):
            return float(s.value)
    return 0.0


def _audit(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "ftwbridge.audit"]


async def test_growing_values_are_counters(env: Env) -> None:
    families = await _metrics(env)
    for name in (
        "ftwbridge_sessions_ended",
        "ftwbridge_pacing_refusals",
        "ftwbridge_door_dropped_tun",
        "ftwbridge_door_uplinks_refused",
        "ftwbridge_door_rosters_refused",
        "ftwbridge_door_takeovers",
        "ftwbridge_mcp_requests",
        "ftwbridge_tool_calls",
    ):
        assert families[name].type == "counter", name
    for name in ("ftwbridge_uplinks", "ftwbridge_calls_in_flight", "ftwbridge_door_tunnels"):
        assert families[name].type == "gauge", name


@pytest.mark.config(http_burst=8, http_per_s=0.01, max_body_bytes=4096)
async def test_every_request_leaves_an_audit_line_and_a_sample(
    env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="ftwbridge.audit")
    home = await env.add_home("o1")
    _key, _agent, token = await env.agent(home)
    narrow = (await env.agent(home, scopes=["ftw.live.read"]))[2]
    caplog.clear()
    statuses = [
        (await post_call(env, None, "status")).status_code,  # 401
        (await post_call(env, narrow, "health_get")).status_code,  # 403 insufficient_scope
        (await post_call(env, token, "no_such_tool")).status_code,  # unknown tool
        (await post_call(env, token, "plan_get", {"hours": "many"})).status_code,  # invalid
        (await post_call(env, token, "events_list", {"before": "bogus"})).status_code,  # box
        (await post_call(env, token, "status")).status_code,  # ok
    ]
    async with env.http(token) as http:
        headers = MODERN | {"mcp-method": "tools/call", "mcp-name": "status"}
        body = json.dumps(call_body("status"))
        r = await http.post(env.url, content=body, headers=headers | {"origin": "http://evil"})
        statuses.append(r.status_code)  # 403 foreign Origin
        r = await http.post(env.url, content=b"x" * 5000, headers=headers)
        statuses.append(r.status_code)  # 413
        r = await http.post(env.url, content=body, headers=headers | {"content-encoding": "br"})
        statuses.append(r.status_code)  # 415, refused at the edge before the route
        while r.status_code != 429:  # the agent's burst of 8 runs out
            r = await http.post(env.url, content=body, headers=headers)
        statuses.append(r.status_code)
    assert statuses == [401, 403, 400, 200, 200, 200, 403, 413, 415, 429]
    lines = _audit(caplog)
    wanted = [
        "status=unauthorized http=401",
        "tool=health_get home=o1",
        "status=insufficient_scope",
        "status=unknown_tool http=400",
        "tool=plan_get",
        "status=invalid_arguments",
        "tool=events_list",
        "status=E_UNKNOWN_OP",
        "status=origin_refused http=403",
        "status=body_too_large http=413",
        "status=bad_coding http=415",
        "status=rate_limited http=429",
    ]
    for fragment in wanted:
        assert any(fragment in line for line in lines), (fragment, lines)
    assert not any("Bearer" in line or token in line for line in lines)
    families = await _metrics(env)
    family, sample = "ftwbridge_mcp_requests", "ftwbridge_mcp_requests_total"
    total = sum(s.value for s in families[family].samples if s.name == sample)
    assert total == len(lines)  # one sample per audit line, and every request has both
    for method, outcome in [
        ("-", "unauthorized"),
        ("tools/call", "insufficient_scope"),
        ("tools/call", "unknown_tool"),
        ("tools/call", "invalid_arguments"),
        ("tools/call", "E_UNKNOWN_OP"),
        ("-", "origin_refused"),
        ("-", "body_too_large"),
        ("-", "bad_coding"),
        ("tools/call", "rate_limited"),
    ]:
        assert _value(families, family, sample, method=method, outcome=outcome) >= 1, outcome
    tools = "ftwbridge_tool_calls"
    assert _value(families, tools, tools + "_total", tool="plan_get", outcome="invalid_arguments")
    assert _value(families, tools, tools + "_total", tool="events_list", outcome="E_UNKNOWN_OP")


async def _refused(env: Env, owner: Owner, *, home: str | None = None) -> int | None:
    async with open_websocket_url(env.door_url) as ws:
        challenge = decode_envelope(await ws.get_message())  # type: ignore[arg-type]
        try:
            await ws.send_message(hello(owner, challenge.b["nonce"], home=home))
            with trio.fail_after(REAL_WAIT_S):
                while True:
                    await ws.get_message()
        except ConnectionClosed as exc:
            return exc.reason.code
    return None


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
async def test_uplinks_refused_are_counted_and_logged_once_a_minute(
    env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    enrolled = Owner("w1", seed="w1")
    await env.bridge.store.enroll_home("w1", enrolled.home_public_key)
    wrong = Owner("w1", seed="another box")
    for _ in range(3):
        assert await _refused(env, wrong) == CLOSE_BAD_SIGNATURE
    assert await _refused(env, wrong, home="nobody") == CLOSE_UNKNOWN_HOME
    warnings = [r.getMessage() for r in caplog.records if r.name == "ftwbridge.door"]
    bad = [w for w in warnings if "uplink refused home=w1" in w and "bad signature" in w]
    assert len(bad) == 1, warnings  # three dials, one line this minute
    assert any("uplink refused home=nobody" in w and "unknown home" in w for w in warnings)
    families = await _metrics(env)
    family, sample = "ftwbridge_door_uplinks_refused", "ftwbridge_door_uplinks_refused_total"
    assert _value(families, family, sample, reason="bad_signature") == 3
    assert _value(families, family, sample, reason="unknown_home") == 1


async def test_re_enrolled_key_reaches_the_running_bridge(
    env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    home = await env.add_home("k1")
    door = env.bridge.door
    assert door.online("k1")
    new_owner = Owner("k1", seed="the new box")
    new_key = new_owner.home_public_key.hex()
    assert await enroll(env.bridge.config, "k1", new_key) == 0  # the CLI's own connection
    await _until(lambda: door.stats.home_key_changes == 1 and not door.online("k1"))
    assert any(
        "home key changed home=k1" in r.getMessage() and "uplink is closed" in r.getMessage()
        for r in caplog.records
    )
    # the old box dials again with the old key: refused, counted, logged
    await _until(lambda: door.stats.uplinks_refused_by.get("bad_signature", 0) >= 1)
    home.proc.terminate()
    # the new box signs with the new key: its uplink and its roster (seq 1, below the one the
    # old key signed) are taken
    await start_stub(env.nursery, env.door_url, "--seed", "the new box", home="k1")
    with trio.fail_after(REAL_WAIT_S):
        roster = await door.wait_roster("k1", lambda r: r.seq == 1)
    verify_roster(roster.signed, home_key=new_owner.home_public_key, home="k1")  # the new key
    assert door.online("k1")


@pytest.mark.config(handshake_s=30.0, call_deadline_s=40.0, door_silence_s=45.0)
async def test_box_with_an_older_roster_is_said_in_words_at_once(
    env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="ftwbridge.audit")
    home = await env.add_home("r1")
    key, agent_id, token = await env.agent(home)  # the roster is at seq 2 now
    assert (await post_call(env, token, "status")).json()["result"]["isError"] is False
    door = env.bridge.door
    home.proc.terminate()  # the box restarts without its state: its roster is at seq 1 again
    await _until(lambda: not door.online("r1"))
    _proc, line = await start_stub(env.nursery, env.door_url, home="r1")
    await _until(lambda: door.rosters_behind_count == 1)
    with trio.fail_after(5):  # not handshake_s (30 s): the bridge knows the box will not answer
        result = (await post_call(env, token, "status")).json()["result"]
    assert result["isError"] is True
    words = result["content"][0]["text"]
    assert "older list of approved assistants" in words and "approve it again at home" in words
    assert "(its list 1, the bridge's 2)" in words
    assert any("status=roster_behind" in line for line in _audit(caplog))
    assert any(
        "roster refused home=r1: stale_seq" in r.getMessage() and "seq 1" in r.getMessage()
        for r in caplog.records
    )
    families = await _metrics(env)
    family = "ftwbridge_door_rosters_refused"
    assert _value(families, family, family + "_total", code="stale_seq") == 1
    assert _value(families, "ftwbridge_door_rosters_behind", "ftwbridge_door_rosters_behind") == 1
    # homes_list is the bridge's own answer: it still works
    assert (await post_call(env, token, "homes_list")).json()["result"]["isError"] is False
    # the owner approves the assistant again at home: the box's roster (seq 2, still not above
    # the bridge's) lists it, so its calls go to the box and are answered
    row = {"op": "put_agent", "home": "r1", "key": key.hex(), "id": agent_id, "client": "demo"}
    row |= {"name": "again", "scopes": ["ftw.live.read"], "ops": [], "caps": {}}
    await console(line["console"], row | {"expiresAtMs": env.bridge.clock() + 3_600_000})
    await _until(lambda: door.roster_behind("r1", key) is None)
    assert (await post_call(env, token, "status")).json()["result"]["isError"] is False
