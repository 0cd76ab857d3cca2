"""`McpService` without sockets: a fake home port answers, the service's rules are checked.

These pin what hostile or broken boxes and clients must never get out of the bridge: a 500,
hidden characters in words, a result that breaks its own schema, or unbounded labels; and the
transport rules of PROTOCOL.md part D that are the service's alone (status codes, headers,
JSON-RPC errors for bad requests). What needs the HTTP shell itself (Host and Origin, the body
bound as Quart enforces it, a connection reused after a refusal) is in tests/e2e/test_transport.py.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from ftwbridge.mcp.control_tools import TOOL_SCOPES
from ftwbridge.mcp.server import HttpRequest, HttpResponse, McpService
from ftwbridge.mcp.words import sentence
from ftwbridge.proto.clean import clean
from ftwbridge.proto.names import Read
from ftwbridge.proto.refusal import Refusal
from ftwbridge.proto.registry import peer_code, peer_reason, peer_retry_ms
from ftwbridge.proto.roster import AgentGrant
from ftwbridge.proto.session import Reply
from ftwbridge.store import TokenRecord

RESOURCE = "http://127.0.0.1:1/mcp"
META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
}
GRANT = AgentGrant(
    "a\x1b[31m1",
    "cl\u202eient",
    "Na\u200bme",
    tuple(sorted(TOOL_SCOPES)),
    (),
    {"x\u200b": 1},
    0,
    2**62,
)
"""The roster row: it grants every tool's scope, so a token's own scopes decide here (the
bridge counts a token's scopes only as far as its roster row grants them)."""
RECORD = TokenRecord(
    "h1", "a\n1 status=ok", b"k" * 32, ("ftw.live.read", "ftw.history.read"), RESOURCE, "c", 2**62
)


class FakeHomes:
    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.calls: list[Read] = []

    async def call(self, home: str, agent_key: bytes, read: Read, body: Any) -> Reply:
        self.calls.append(read)
        if isinstance(self.answer, Refusal):
            raise self.answer
        return self.answer  # type: ignore[no-any-return]

    async def grant(self, home: str, agent_key: bytes) -> AgentGrant | None:
        return GRANT


def service(answer: Any, on_call: Any = None, record: TokenRecord = RECORD) -> McpService:
    async def verify(token: str) -> TokenRecord | None:
        return record if token == "good" else None

    return McpService(
        homes=FakeHomes(answer),
        verify_token=verify,
        resource=RESOURCE,
        resource_metadata=RESOURCE + "-meta",
        max_body_bytes=1 << 20,
        call_deadline_s=5,
        wall_ms=lambda: 1000,
        on_call=on_call,
    )


async def send(
    svc: McpService, data: bytes, headers: dict[str, str] | None = None, method: str = "POST"
) -> HttpResponse:
    """One request as the HTTP shell hands it over: JSON with a good bearer token, `headers`
    added or replacing those."""
    hs = {"content-type": ["application/json"], "authorization": ["Bearer good"]}
    hs |= {k: [v] for k, v in (headers or {}).items()}

    async def read() -> bytes:
        return data

    return await svc.handle(HttpRequest(method, hs, read, len(data)))


async def post(
    svc: McpService, body: Any, headers: dict[str, str] | None = None, raw: bytes | None = None
) -> tuple[int, Any]:
    data = raw if raw is not None else json.dumps(body).encode()
    resp = await send(svc, data, headers)
    return resp.status, json.loads(resp.body) if resp.body else None


def call(name: str, arguments: Any) -> tuple[dict[str, Any], dict[str, str]]:
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments, "_meta": META},
    }
    return body, {
        "mcp-protocol-version": "2026-07-28",
        "mcp-method": "tools/call",
        "mcp-name": name,
    }


@pytest.mark.parametrize(
    "args",
    [
        {"skewMs": "abc"},
        {"maxMs": [1]},
        {"skewMs": float("inf")},
        {"retryAfterMs": 2**63},
        {"needScope": "\x1b[2J\u202eIGNORE\u200b\x07"},
        {"id": {"x": 1}},
        {"what": None},
    ],
)
def test_words_never_raise_and_are_clean(args: dict[str, Any]) -> None:
    for code in (
        "E_CLOCK_SKEW",
        "E_BOOTING",
        "E_SCOPE_DENIED",
        "E_NOT_FOUND",
        "E_RATE_LIMITED",
        "E_NEW\x1b[1m",
    ):
        text = sentence(code, args, args.get("retryAfterMs"))
        assert clean(text) == text and "\n" not in text
    assert "86400 s" in sentence("E_RATE_LIMITED", {"retryAfterMs": 2**63})


def test_peer_values_are_bounded() -> None:
    assert peer_code("E_FUTURE_THING") == "E_FUTURE_THING"
    assert peer_code("E_X ...\nINFO forged") == peer_code(7) == "E_BAD_BODY"
    assert peer_reason("oops\nERROR") == "closed" and peer_reason("revoked") == "revoked"
    assert (
        peer_retry_ms(True) is None
        and peer_retry_ms(-5) is None
        and peer_retry_ms(2**63) == 86_400_000
    )


async def test_refusal_words_and_codes_are_clean() -> None:
    outcomes: list[str] = []
    svc = service(
        Refusal("E_X\n\x1b[1mforged", {"needScope": "\u202eevil"}, 2**63),
        lambda t, o, s: outcomes.append(o),
    )
    status, body = await post(svc, *call("status", {}))
    result = body["result"]
    assert status == 200 and result["isError"]
    err = result["_meta"]["ftwbridge/error"]
    assert err["code"] == "E_BAD_BODY" and clean(err["message"]) == err["message"]
    assert outcomes == ["other"]
    svc = service(Refusal("E_SCOPE_DENIED", {"needScope": "\x1b[2J\u202eIGNORE\u200b\x07"}, None))
    _, body = await post(svc, *call("status", {}))
    text = body["result"]["content"][0]["text"]
    assert clean(text) == text and "IGNORE" in text


async def test_answers_that_break_the_schema_are_bad_bodies() -> None:
    for bad in ([1, 2, 3], {"fields": "not an object"}, "text"):
        svc = service(Reply(1, "live", bad))
        _, body = await post(svc, *call("status", {}))
        assert (
            body["result"]["isError"]
            and body["result"]["_meta"]["ftwbridge/error"]["code"] == "E_BAD_BODY"
        )
    svc = service(Reply(1, "hist.end", {"resActual": "1h", "gaps": "text"}))
    _, body = await post(svc, *call("history_query", {"range": "6h"}))
    assert body["result"]["_meta"]["ftwbridge/error"]["code"] == "E_BAD_BODY"


async def test_homes_list_is_cleaned() -> None:
    _, body = await post(service(None), *call("homes_list", {}))
    texts = json.dumps(body["result"]["structuredContent"], ensure_ascii=False)
    assert clean(texts) == texts and "Name" in texts


@pytest.mark.parametrize("arguments", [[], 0, "", [1], "x"])
async def test_arguments_must_be_an_object(arguments: Any) -> None:
    status, body = await post(service(None), *call("status", arguments))
    assert status == 400 and body["error"]["code"] == -32602


async def test_range_with_a_trailing_newline_is_refused() -> None:
    svc = service(Reply(1, "hist.end", {"resActual": "1h", "gaps": []}))
    _, body = await post(svc, *call("history_query", {"range": "24h\n"}))
    assert body["result"]["isError"] and "not valid" in body["result"]["content"][0]["text"]


@pytest.mark.parametrize(
    "raw",
    [
        b'{"jsonrpc":"2.0","id":"\\ud800","method":"tools/list"}',
        b'{"jsonrpc":"2.0","id":1,"method":"\\ud800"}',
    ],
)
async def test_lone_surrogates_are_400_not_500(raw: bytes) -> None:
    status, body = await post(service(None), None, {}, raw=raw)
    assert status == 400 and body["error"]["code"] == -32600 and body["id"] in (None, 1)


async def test_non_text_version_and_repeated_legacy_header() -> None:
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/list",
        "params": {"_meta": META | {"io.modelcontextprotocol/protocolVersion": 7}},
    }
    status, out = await post(
        service(None), body, {"mcp-protocol-version": "2026-07-28", "mcp-method": "tools/list"}
    )
    assert (status, out["error"]["code"]) == (400, -32602)
    svc = service(None)
    hs = {
        "content-type": ["application/json"],
        "authorization": ["Bearer good"],
        "mcp-protocol-version": ["2025-06-18", "2024-11-05"],
    }
    data = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).encode()

    async def read() -> bytes:
        return data

    resp = await svc.handle(HttpRequest("POST", hs, read, len(data)))
    assert resp.status == 400 and json.loads(resp.body)["error"]["code"] == -32020


async def test_token_for_another_audience_is_401() -> None:
    other = TokenRecord(
        "h1", "a1", b"k" * 32, ("ftw.live.read",), "https://elsewhere.example/mcp", "c", 2**62
    )

    svc = service(None, record=other)
    status, _ = await post(svc, *call("status", {}))
    assert status == 401


# The transport rules of PROTOCOL.md part D that are the service's alone (they ran against a live
# bridge and a stub home process in tests/e2e/test_transport.py, half a second each).

MODERN = {"accept": "application/json, text/event-stream", "mcp-protocol-version": "2026-07-28"}
LIST_HEADERS = MODERN | {"mcp-method": "tools/list"}


def list_body(rid: Any = 1) -> bytes:
    body = {"jsonrpc": "2.0", "id": rid, "method": "tools/list", "params": {"_meta": META}}
    return json.dumps(body).encode()


def method_body(method: str, rid: Any = 7) -> bytes:
    body = {"jsonrpc": "2.0", "id": rid, "method": method, "params": {"_meta": META}}
    return json.dumps(body).encode()


LIVE = Reply(1, "live", {"fields": {"grid_w": 120}, "sources": {}})
DEEP_ID = b'{"jsonrpc":"2.0","id":' + b"[" * 100_000 + b"]" * 100_000 + b',"method":"tools/list"}'


@pytest.mark.parametrize(
    ("raw", "headers", "status", "code", "rid"),
    [
        pytest.param(
            list_body(), MODERN | {"mcp-method": "tools/call"}, 400, -32020, 1, id="method-header"
        ),
        pytest.param(
            json.dumps(call("status", {})[0]).encode(),
            MODERN | {"mcp-method": "tools/call", "mcp-name": "cars_list"},
            400,
            -32020,
            1,
            id="name-header",
        ),
        pytest.param(
            method_body("nope/nothing"),
            MODERN | {"mcp-method": "nope/nothing"},
            404,
            -32601,
            7,
            id="unknown-method",
        ),
        pytest.param(
            method_body("initialize"),
            MODERN | {"mcp-method": "initialize"},
            404,
            -32601,
            7,
            id="initialize-in-the-modern-era",
        ),
        pytest.param(
            b"[" + list_body(1) + b"," + list_body(2) + b"]",
            LIST_HEADERS,
            400,
            -32600,
            None,
            id="batch",
        ),
        pytest.param(b"{not json", LIST_HEADERS, 400, -32700, None, id="not-json"),
        pytest.param(b"\xff\xfe\x00", LIST_HEADERS, 400, -32700, None, id="not-utf8"),
        pytest.param(list_body(None), LIST_HEADERS, 400, -32600, None, id="id-null"),
        pytest.param(
            b'{"jsonrpc":"2.0","id":"abc","method":"tools/list","params":{}}',
            LIST_HEADERS,
            400,
            -32602,
            "abc",
            id="bad-envelope-echoes-the-id",
        ),
        pytest.param(DEEP_ID, LIST_HEADERS, 400, None, None, id="deeply-nested-id"),
        pytest.param(list_body("x" * 10_000), LIST_HEADERS, 400, None, None, id="huge-id"),
    ],
)
async def test_a_bad_request_is_a_jsonrpc_error(
    raw: bytes, headers: dict[str, str], status: int, code: int | None, rid: Any
) -> None:
    """Where `code` is None, any JSON-RPC error will do, with a null id."""
    resp = await send(service(None), raw, headers)
    body = json.loads(resp.body)
    assert (resp.status, body["id"]) == (status, rid)
    assert code is None or body["error"]["code"] == code


async def test_an_unsupported_version_is_refused_with_ours() -> None:
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/list",
        "params": {"_meta": META | {"io.modelcontextprotocol/protocolVersion": "2030-01-01"}},
    }
    status, out = await post(
        service(None), body, LIST_HEADERS | {"mcp-protocol-version": "2030-01-01"}
    )
    assert status == 400 and out["error"]["code"] == -32022
    assert out["error"]["data"]["supported"] == ["2026-07-28"]


async def test_the_base64_form_of_a_mirrored_header_is_decoded() -> None:
    b64 = "=?base64?" + base64.b64encode(b"status").decode() + "?="
    body, headers = call("status", {})
    status, out = await post(service(LIVE), body, MODERN | headers | {"mcp-name": b64})
    assert status == 200 and not out["result"]["isError"]
    assert out["result"]["structuredContent"]["fields"] == {"grid_w": 120}


@pytest.mark.parametrize(
    "headers",
    [
        MODERN | {"mcp-method": "notifications/initialized"},
        {"mcp-protocol-version": "2025-11-25"},
    ],
    ids=["modern", "legacy"],
)
async def test_a_notification_is_202_with_no_body(headers: dict[str, str]) -> None:
    raw = b'{"jsonrpc":"2.0","method":"notifications/initialized"}'
    resp = await send(service(None), raw, headers)
    assert (resp.status, resp.body) == (202, b"")


async def test_a_legacy_request_without_a_version_is_answered_without_a_session() -> None:
    """No `MCP-Protocol-Version`: taken as 2025-03-26 and answered; no session is made."""
    raw = json.dumps({"jsonrpc": "2.0", "id": 3, "method": "tools/list"}).encode()
    resp = await send(service(None), raw)
    assert resp.status == 200 and len(json.loads(resp.body)["result"]["tools"]) == 19
    assert "mcp-session-id" not in resp.headers


async def test_server_discover_lists_the_modern_versions() -> None:
    raw = method_body("server/discover", rid=4)
    status, out = await post(service(None), None, MODERN | {"mcp-method": "server/discover"}, raw)
    assert status == 200 and out["result"]["supportedVersions"] == ["2026-07-28"]


async def test_a_stray_session_id_is_ignored() -> None:
    resp = await send(service(None), list_body(), LIST_HEADERS | {"mcp-session-id": "whatever"})
    assert resp.status == 200 and "tools" in json.loads(resp.body)["result"]


@pytest.mark.parametrize(
    ("accept", "status"),
    [
        ("application/json, text/event-stream", 200),
        ("application/json", 200),
        ("*/*", 200),
        (None, 200),
        ("text/event-stream", 406),
    ],
)
async def test_accept_must_allow_json(accept: str | None, status: int) -> None:
    headers = {k: v for k, v in LIST_HEADERS.items() if k != "accept"}
    if accept is not None:
        headers["accept"] = accept
    resp = await send(service(None), list_body(), headers)
    assert resp.status == status
    if status == 200:
        assert resp.headers["content-type"].startswith("application/json")


async def test_only_post_and_only_json() -> None:
    """Other methods are 405 with `Allow: POST` and leave nothing behind (no session to end
    with DELETE); a body that is not declared JSON is 415."""
    svc = service(None)
    for method in ("GET", "DELETE", "HEAD", "PUT"):
        resp = await send(svc, b"", LIST_HEADERS, method)
        assert resp.status == 405 and resp.headers["allow"] == "POST"
    resp = await send(svc, list_body(), LIST_HEADERS | {"content-type": "text/plain"})
    assert resp.status == 415
    assert (await send(svc, list_body(), LIST_HEADERS)).status == 200


async def test_a_forwarded_request_is_authenticated_by_its_token_digest() -> None:
    """The internal listener hands over the digest the sender signed in place of the token;
    it is checked as a token is (an unknown digest is 401), and no Authorization is read."""
    from ftwbridge.store import hash_token

    async def by_digest(digest: bytes) -> TokenRecord | None:
        return RECORD if digest == hash_token("good") else None

    svc = McpService(
        homes=FakeHomes(None),
        verify_token=lambda token: _none(),
        resource=RESOURCE,
        resource_metadata=RESOURCE + "-meta",
        max_body_bytes=1 << 20,
        call_deadline_s=5,
        wall_ms=lambda: 1000,
        verify_digest=by_digest,
    )
    data = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).encode()
    headers = {"content-type": ["application/json"], "accept": ["application/json"]}

    async def read() -> bytes:
        return data

    for digest, status in ((hash_token("good"), 200), (hash_token("other"), 401)):
        req = HttpRequest("POST", headers, read, len(data), token_digest=digest)
        assert (await svc.handle(req)).status == status


async def _none() -> None:
    return None


class FakeLive:
    """A `LivePort` whose feed is fresh (`view`) or not running (None); counts leases."""

    def __init__(self, view: dict[str, Any] | None) -> None:
        self.view = view
        self.leases: list[tuple[str, float]] = []

    def live_view(self, home: str, agent_key: bytes) -> dict[str, Any] | None:
        return self.view

    def lease(self, home: str, agent_key: bytes, seconds: float) -> None:
        self.leases.append((home, seconds))


def _with_live(view: dict[str, Any] | None) -> tuple[McpService, FakeHomes]:
    async def verify(token: str) -> TokenRecord | None:
        return RECORD if token == "good" else None

    homes = FakeHomes(Reply(1, "live", {"fields": {"3": 1200}, "sources": {}}))
    svc = McpService(
        homes=homes,
        verify_token=verify,
        resource=RESOURCE,
        resource_metadata=RESOURCE + "-meta",
        max_body_bytes=1 << 20,
        call_deadline_s=5,
        wall_ms=lambda: 1000,
        live=FakeLive(view),
    )
    return svc, homes


async def test_status_is_answered_from_a_fresh_live_feed_without_a_box_read() -> None:
    """PROTOCOL.md part D: a `live` read is answered from a fresh feed where one runs (the
    `status` tool, the `live` resource and the home view all go through it)."""
    fed = {"fields": {"3": 900}, "sources": {"s\u200b1": {"state": "ok"}}}
    svc, homes = _with_live(fed)
    status, out = await post(svc, *call("status", {}))
    assert status == 200 and homes.calls == []  # no box read
    assert out["result"]["structuredContent"] == {
        "fields": {"3": 900},
        "sources": {"s1": {"state": "ok"}},
    }
    svc, homes = _with_live(None)  # no feed runs: the box is read as before
    status, out = await post(svc, *call("status", {}))
    assert status == 200 and homes.calls == [Read.LIVE_GET]
    assert out["result"]["structuredContent"]["fields"] == {"3": 1200}
