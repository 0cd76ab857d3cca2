"""The internal listener's app: `/mcp` requests other instances forward.
(`mesh/streams.StreamingRoute` takes their POSTs ahead of this app, with the same checks, so
that a listen stream can flow; this route answers the other methods.)

Each request's mesh headers are checked first (`signing.Checker`): anything unsigned,
forged, misaddressed, stale or replayed is refused with 403 and a JSON-RPC error in words,
one log line and one count (`on_refused`). A request that passes goes to the same
`McpService` as the main listener's with only the headers its signature covers, marked with the epoch the sender named, so the token is
checked again in full, the per-agent limits and the home's pacing apply here, and a home no
longer held at that epoch is answered 421 (`McpService`'s `mesh` port), which only the
sender sees.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable

from quart import Response, request
from quart_trio import QuartTrio
from werkzeug.exceptions import RequestEntityTooLarge, RequestTimeout

from ftwbridge.mcp import deadline
from ftwbridge.mcp.server import HttpRequest, McpService

from . import signing
from .forward import PATH

log = logging.getLogger("ftwbridge.mesh")

JSONRPC_INVALID_REQUEST = -32600
"""JSON-RPC 2.0's "Invalid Request" (jsonrpc.org/specification, section 5.1)."""


def _refusal(status: int, words: str) -> Response:
    body = {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": JSONRPC_INVALID_REQUEST, "message": words},
    }
    return Response(json.dumps(body), status, {"content-type": "application/json"})


def create_internal_app(
    *,
    service: McpService,
    checker: signing.Checker,
    wall_ms: Callable[[], int],
    max_body_bytes: int,
    body_timeout_s: float,
    on_refused: Callable[[str], None] | None = None,
) -> QuartTrio:
    """The internal listener's app: `POST /mcp` forwarded by another instance (the node adds
    the relayed door messages' route, `relay.add_relay_route`); anything else is 404.

    Args:
        service: this instance's `/mcp` service (the main listener's).
        checker: checks the mesh headers (it remembers nonces).
        wall_ms: the wall clock, ms since the Unix epoch.
        max_body_bytes, body_timeout_s: the body's bounds, as on the main listener.
        on_refused: told the reason of each refused request (the metric).
    """
    app = QuartTrio("ftwbridge-internal")
    app.config["MAX_CONTENT_LENGTH"] = max_body_bytes
    app.config["BODY_TIMEOUT"] = body_timeout_s
    app.config["PROVIDE_AUTOMATIC_OPTIONS"] = False

    @app.route(PATH, methods=["POST", "GET", "PUT", "DELETE", "PATCH"])
    async def forwarded() -> Response:
        headers: dict[str, list[str]] = {}
        for name, value in request.headers.items():
            headers.setdefault(name.lower(), []).append(value)
        try:
            raw = await request.get_data(cache=False, as_text=False)
        except RequestEntityTooLarge:
            return _refusal(413, "Request body too large")
        except RequestTimeout:
            return _refusal(408, "Request body not received in time")
        body = raw if isinstance(raw, bytes) else raw.encode()
        try:
            signed = checker.check(request.method, PATH, headers, body, wall_ms())
        except signing.MeshRefused as exc:
            log.warning(
                "internal listener refused a request from %s (%s): %s",
                request.remote_addr,
                exc.reason,
                exc.words,
            )
            if on_refused is not None:
                on_refused(exc.reason)
            return _refusal(403, f"Forwarded request refused: {exc.words}")
        covered = dict(signed.headers)
        budget_s = deadline.parse_budget(covered.pop(deadline.BUDGET, None))

        async def read_body() -> bytes:
            return body

        req = HttpRequest(  # only the headers the sender signed: none added on the way
            request.method,
            covered,
            read_body,
            len(body),
            remote=signed.sender,
            mesh_epoch=signed.epoch,
            token_digest=signed.token_digest,
            budget_s=budget_s,
        )
        resp = await service.handle(req)
        return Response(resp.body, resp.status, resp.headers)

    return app
