"""The rules on every request's framing and coding, before its route reads a byte
(`framing_problem`), and their Quart hook (`framing_and_coding`); `/mcp` applies them itself
(`mcp.asgi.McpRoute`)."""

from __future__ import annotations

import json

from mcp_types import jsonrpc
from quart import Response, request


def refusal_body(path: str, message: str) -> dict[str, object]:
    """The body of a refusal before any route runs: on `/mcp` the JSON-RPC error object with
    no id (as `mcp.inbound.Rejection.body` writes it; this module, below `mcp`, imports
    nothing of it), elsewhere an OAuth-style error (RFC 6749 section 5.2)."""
    if path == "/mcp":
        error = {"code": jsonrpc.INVALID_REQUEST, "message": message}
        return {"jsonrpc": "2.0", "id": None, "error": error}
    return {"error": "invalid_request", "error_description": message}


def _refusal(status: int, message: str, headers: dict[str, str]) -> Response:
    """A refusal before any route runs (`refusal_body`)."""
    body = refusal_body(request.path, message)
    return Response(json.dumps(body), status, {"content-type": "application/json", **headers})


def framing_problem(headers: dict[str, list[str]]) -> tuple[int, str, dict[str, str]] | None:
    """Rules on every request's framing and coding, before its route reads a byte: None, or
    (status, words, extra headers) of the refusal. `headers` maps lower-case names to values.

    - `Content-Length` and `Transfer-Encoding` together: refused with 400 and the connection
      closed (RFC 9112 section 6.1: "the server MUST close the connection after responding";
      refusing is the safer of its two choices, since a proxy in front may have framed the
      request by the other header).
    - A `Content-Encoding` other than `identity`: 415 with `Accept-Encoding: identity` (RFC
      9110 sections 8.4 and 15.5.16); the bridge decodes no coding, and a coded body read as
      plain would be misread, not refused.
    """
    if "content-length" in headers and "transfer-encoding" in headers:
        return (
            400,
            "Content-Length and Transfer-Encoding together are refused",
            {"connection": "close"},
        )
    codings = [
        c.strip().lower()
        for value in headers.get("content-encoding", ())
        for c in value.split(",")
        if c.strip()
    ]
    if any(c != "identity" for c in codings):
        return (
            415,
            "Content-Encoding is not supported: send the body uncompressed",
            {"accept-encoding": "identity"},
        )
    return None


async def framing_and_coding() -> Response | None:
    """`framing_problem` for the Quart routes (a Quart `before_request` hook)."""
    headers: dict[str, list[str]] = {}
    for name, value in request.headers.items():
        headers.setdefault(name.lower(), []).append(value)
    problem = framing_problem(headers)
    return None if problem is None else _refusal(*problem)
