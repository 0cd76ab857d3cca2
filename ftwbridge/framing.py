"""The rules on every request's framing and coding, before its route reads a byte
(`framing_problem`), and their Quart hook (`framing_and_coding`); `/mcp` applies them itself
(`mcp.asgi.McpRoute`). Also the Quart apps' own refusals (no route, a method the route does
not take, a body too large or too slow, a route that failed) in plain sentences
(`plain_http_errors`) instead of Quart's HTML pages."""

from __future__ import annotations

import json

from mcp_types import jsonrpc
from quart import Quart, Response, request
from werkzeug.exceptions import HTTPException, MethodNotAllowed


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


_WORDS = {
    400: "the request could not be read",
    404: "nothing is served at this path on this listener",
    408: "the request's body did not arrive in time",
    413: "the request's body is larger than this listener takes",
    500: "the request failed on the bridge; the bridge's log says why",
}


def http_error_words(exc: HTTPException, served: str) -> Response:
    """A Quart app's own refusal (`werkzeug.exceptions.HTTPException`: Quart raises 404 for
    no route, 405 for a method the route does not take, 408 and 413 for a body too slow or
    too large, and 500 for a route that raised) as one plain-text sentence with the same
    status and headers (a 405 keeps `Allow`, RFC 9110 section 15.5.6). `served` names what
    the listener does serve, for a 404's sentence."""
    code = exc.code or 500
    words = _WORDS.get(code, "the request was refused")
    if code == 404:
        words = f"{words}; it serves {served}"
    elif isinstance(exc, MethodNotAllowed):
        allowed = ", ".join(sorted(exc.valid_methods or ()))
        words = f"this path does not take {request.method}; it takes {allowed}"
    headers = {k: v for k, v in exc.get_headers() if k.lower() != "content-type"}
    headers["content-type"] = "text/plain; charset=utf-8"
    return Response(f"{code} {exc.name}: {words}.\n", code, headers)


def plain_http_errors(app: Quart, served: str) -> None:
    """Answer every Quart-raised refusal of `app` in words (`http_error_words`); a route's own
    answers (OAuth's JSON errors, the consent pages) are not touched."""

    async def handler(exc: HTTPException) -> Response:
        return http_error_words(exc, served)

    app.register_error_handler(HTTPException, handler)
