"""JSON-RPC answers of `/mcp` as HTTP responses: a result in the route's era, and an error with
the HTTP status the JSON-RPC code maps to (`inbound.HTTP_STATUS`, MCP 2026-07-28 "Errors")."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mcp_types import jsonrpc

from . import inbound
from .http import HttpResponse, json_response
from .results import OkResult


def result_response(
    route: inbound.Route, result: dict[str, Any], cacheable: bool = False, ttl_ms: int = 0
) -> HttpResponse:
    """200 with `result` for `route`'s id; in the 2026-07-28 era marked complete, and when
    `cacheable`, private for `ttl_ms` (ms). An `OkResult`'s `structuredContent` is sent as the
    bytes it was encoded to for its text block, not encoded again."""
    encoded = result.structured_json if isinstance(result, OkResult) else None
    if route.era == "modern":
        result = result | {"resultType": "complete"}
        if cacheable:
            result |= {"ttlMs": ttl_ms, "cacheScope": "private"}
    if encoded is None:
        return json_response(200, {"jsonrpc": "2.0", "id": route.id, "result": result})
    # The envelope's last member is the result, an object with members besides
    # structuredContent, so its compact JSON ends with the two closing braces; the encoded
    # structuredContent goes in before them, as the result's last member.
    rest = {k: v for k, v in result.items() if k != "structuredContent"}
    response = json_response(200, {"jsonrpc": "2.0", "id": route.id, "result": rest})
    response.body = response.body[:-2] + b',"structuredContent":' + encoded + b"}}"
    return response


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
