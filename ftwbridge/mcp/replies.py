"""JSON-RPC answers of `/mcp` as HTTP responses: a result in the route's era, and an error with
the HTTP status the JSON-RPC code maps to (`inbound.HTTP_STATUS`, MCP 2026-07-28 "Errors")."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from mcp_types import jsonrpc

from . import inbound
from .fastjson import json_string
from .http import HttpResponse, json_response
from .results import DATA_NOTE, OkResult, compact_json

_NOTE_BLOCK: Final = compact_json({"type": "text", "text": DATA_NOTE})
"""The data note's content block, as `ok_result` makes it, encoded once."""


def result_response(
    route: inbound.Route, result: dict[str, Any], cacheable: bool = False, ttl_ms: int = 0
) -> HttpResponse:
    """200 with `result` for `route`'s id; in the 2026-07-28 era marked complete, and when
    `cacheable`, private for `ttl_ms` (ms). An `OkResult` is written from what it was encoded
    from (`_ok_body`), not encoded again."""
    if isinstance(result, OkResult):
        return HttpResponse(
            200, {"content-type": "application/json"}, _ok_body(route, result, cacheable, ttl_ms)
        )
    if route.era == "modern":
        result = result | {"resultType": "complete"}
        if cacheable:
            result |= {"ttlMs": ttl_ms, "cacheScope": "private"}
    return json_response(200, {"jsonrpc": "2.0", "id": route.id, "result": result})


def _ok_body(route: inbound.Route, ok: OkResult, cacheable: bool, ttl_ms: int) -> bytes:
    """The body `json_response` writes for `ok` (`ok_result`'s members: its text block, the
    data note, `isError`), with the era's members after them and `structuredContent` last,
    as its encoded bytes: the same bytes as the envelope and those members encoded by
    `json_response` with `structuredContent` put in before the closing braces."""
    tail = ""
    if route.era == "modern":
        tail = ',"resultType":"complete"'
        if cacheable:
            tail += f',"ttlMs":{compact_json(ttl_ms)},"cacheScope":"private"'
    head = (
        f'{{"jsonrpc":"2.0","id":{compact_json(route.id)},"result":{{"content":'
        f'[{{"type":"text","text":{json_string(ok.text)}}},{_NOTE_BLOCK}],"isError":false{tail}'
    )
    return (
        head.encode("utf-8", "backslashreplace")
        + b',"structuredContent":'
        + ok.structured_json
        + b"}}"
    )


def error_response(route: inbound.Route, code: int, message: str, data: Any = None) -> HttpResponse:
    """A JSON-RPC error for `route`'s id, with the status its `code` maps to (a legacy-era
    unknown method stays a 200, as clients of that era expect)."""
    rej = inbound.Rejection(inbound.HTTP_STATUS.get(code, 200), code, message, route.id, data)
    status = rej.status if route.era == "modern" or code != jsonrpc.METHOD_NOT_FOUND else 200
    return json_response(status, rej.body())


def insufficient_scope(
    route: inbound.Route,
    name: str,
    missing: list[str],
    challenge: Callable[[str, str, str], str],
) -> HttpResponse:
    """403 `insufficient_scope` naming the scopes the tool `name` (or `name` itself when it
    says what, "resource live" or "prompt troubleshoot") needs, for step-up (RFC 6750 section
    3.1; MCP authorization, "Scope Challenge Handling"); `challenge(error, words, scope)` is
    the `WWW-Authenticate` value (`auth.BearerAuth.challenge`)."""
    scope = " ".join(missing)
    what = name if " " in name else f"tool {name}"
    rej = inbound.Rejection(
        403,
        jsonrpc.INVALID_REQUEST,
        f"insufficient_scope: the {what} needs {scope}",
        route.id,
        {"requiredScopes": missing},
    )
    words = challenge("insufficient_scope", f"The {what} needs {scope}", scope)
    return json_response(403, rej.body(), {"www-authenticate": words})
