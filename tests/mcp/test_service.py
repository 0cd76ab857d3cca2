"""`McpService` without sockets: a fake home port answers, the service's rules are checked.

These pin what hostile or broken boxes and clients must never get out of the bridge: a 500,
hidden characters in words, a result that breaks its own schema, or unbounded labels.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from ftwbridge.mcp.server import HttpRequest, McpService
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
    "a\x1b[31m1", "cl\u202eient", "Na\u200bme", ("ftw.live.read",), (), {"x\u200b": 1}, 0, 2**62
)
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


async def post(
    svc: McpService, body: Any, headers: dict[str, str] | None = None, raw: bytes | None = None
) -> tuple[int, Any]:
    data = raw if raw is not None else json.dumps(body).encode()
    hs = {"content-type": ["application/json"], "authorization": ["Bearer good"]}
    hs |= {k: [v] for k, v in (headers or {}).items()}

    async def read() -> bytes:
        return data

    resp = await svc.handle(HttpRequest("POST", hs, read, len(data)))
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
