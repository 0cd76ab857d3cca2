"""A tool's success is encoded once: the response carries `ok_result`'s own bytes for its
`structuredContent`, and the body means exactly what encoding the whole result again meant."""

from __future__ import annotations

import json
from typing import Any

import pytest

from ftwbridge.mcp.http import json_response
from ftwbridge.mcp.inbound import Route
from ftwbridge.mcp.replies import result_response
from ftwbridge.mcp.results import OkResult, ok_result

VALUES: list[dict[str, Any]] = [
    {},
    {"fields": {"grid_w": 446, "pv_w": -2}, "mode": "planner_arbitrage", "ok": True},
    {"name": 'Zoë\'s "home" \\ ✓', "nested": [{"a": None}, [1.5, []]], "empty": {}},
    {"lone": "\ud800 surrogate", "tab": "a\tb", "ctl": "\x00\x1f"},
    {"structuredContent": {"x": 1}, "}}": "}}"},
]
ROUTES = [
    Route("modern", "2026-07-28", "tools/call", {}, 7),
    Route("legacy", "2025-11-25", "tools/call", {}, "id-\u2603"),
    Route("modern", "2026-07-28", "tools/call", {}, None),
]


def _whole(route: Route, result: dict[str, Any], cacheable: bool, ttl_ms: int) -> bytes:
    """The body as it was made before: the whole result encoded at once."""
    if route.era == "modern":
        result = result | {"resultType": "complete"}
        if cacheable:
            result |= {"ttlMs": ttl_ms, "cacheScope": "private"}
    return json_response(200, {"jsonrpc": "2.0", "id": route.id, "result": result}).body


def _spliced(route: Route, result: OkResult, cacheable: bool, ttl_ms: int) -> bytes:
    """The body as the encoding of every member but `structuredContent`, with its bytes put
    in before the closing braces (how it was made before it was written from a template)."""
    rest = {k: v for k, v in result.items() if k != "structuredContent"}
    if route.era == "modern":
        rest |= {"resultType": "complete"}
        if cacheable:
            rest |= {"ttlMs": ttl_ms, "cacheScope": "private"}
    body = json_response(200, {"jsonrpc": "2.0", "id": route.id, "result": rest}).body
    return body[:-2] + b',"structuredContent":' + result.structured_json + b"}}"


@pytest.mark.parametrize("value", VALUES)
@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("cacheable", [False, True])
def test_the_body_is_byte_for_byte_the_spliced_encoding(
    value: dict[str, Any], route: Route, cacheable: bool
) -> None:
    result = ok_result(value)
    assert result_response(route, result, cacheable, 2500).body == _spliced(
        route, result, cacheable, 2500
    )


@pytest.mark.parametrize("value", VALUES)
@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("cacheable", [False, True])
def test_the_body_means_what_encoding_it_whole_meant(
    value: dict[str, Any], route: Route, cacheable: bool
) -> None:
    result = ok_result(value)
    got = result_response(route, result, cacheable, 2500)
    assert got.status == 200
    assert got.headers["content-type"] == "application/json"
    want = _whole(route, dict(result), cacheable, 2500)
    assert json.loads(got.body) == json.loads(want)
    assert len(got.body) == len(want)  # the same members, only in another order
    assert got.body.count(b'"structuredContent":') == 1 + json.dumps(value).count(
        '"structuredContent":'
    )


def test_the_structured_bytes_are_the_text_blocks_own() -> None:
    value = {"grid_w": 446, "label": "P1 ✓"}
    result = ok_result(value)
    assert isinstance(result, OkResult)
    assert result.structured_json == result["content"][0]["text"].encode()
    body = result_response(ROUTES[0], result).body
    assert body.endswith(b',"structuredContent":' + result.structured_json + b"}}")


def test_a_merged_copy_is_a_plain_result_encoded_whole() -> None:
    merged = ok_result({"a": 1}) | {"_meta": {"k": "v"}}
    assert not isinstance(merged, OkResult)
    got = result_response(ROUTES[0], merged).body
    assert got == _whole(ROUTES[0], merged, False, 0)
    assert json.loads(got)["result"]["_meta"] == {"k": "v"}
