"""Forwarded `/mcp` requests on plain ASGI at the internal listener: the one route that
answers them, so that a forwarded `subscriptions/listen` can stream (docs/live.md, "Many
instances"): a listen's answer is a `text/event-stream` that lives while the client keeps it,
which a Quart response cannot carry from our push-style writer.

`StreamingRoute` takes every request for `/mcp`, in this order: the body within its bounds
(413, 408), the mesh headers (`signing.Checker`: anything unsigned, forged, misaddressed,
stale or replayed is 403 in words, one log line, one count), then `McpService.handle` with only
the headers the signature covers, marked with the sender's epoch (so the token is checked again
in full, the per-agent limits and the home's pacing apply here, and a home no longer held at
that epoch is answered 421, which only the sender sees). The answer goes out whole
(`mcp.asgi.respond`) or as a stream (`mcp.asgi.respond_stream`, cancelled when the sending
instance hangs up, which it does when its client does). Every other path goes to the app
(`mesh/listener.py`: the relayed door messages, and 404).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable

from ftwbridge.mcp import deadline
from ftwbridge.mcp.asgi import (
    Asgi,
    Receive,
    Scope,
    Send,
    header_lists,
    read_body,
    respond,
    respond_stream,
    store_unavailable,
)
from ftwbridge.mcp.server import (
    BodyGone,
    BodyTooLarge,
    BodyTooSlow,
    HttpRequest,
    HttpResponse,
    McpService,
)
from ftwbridge.store import StoreError

from . import signing
from .forward import PATH

log = logging.getLogger("ftwbridge.mesh")

JSONRPC_INVALID_REQUEST = -32600
"""JSON-RPC 2.0's "Invalid Request" (jsonrpc.org/specification, section 5.1)."""


def _refusal(status: int, words: str) -> HttpResponse:
    error = {"code": JSONRPC_INVALID_REQUEST, "message": words}
    body = json.dumps({"jsonrpc": "2.0", "id": None, "error": error}).encode()
    return HttpResponse(status, {"content-type": "application/json"}, body)


class StreamingRoute:
    """An ASGI app: `/mcp` forwarded by another instance, answered here (see the module);
    everything else to `app`.

    Args:
        app: the internal listener's Quart app.
        service: this instance's `/mcp` service.
        checker: checks the mesh headers (it remembers nonces).
        wall_ms: the wall clock, ms since the Unix epoch.
        max_body_bytes, body_timeout_s: the body's bounds (bytes, seconds).
        on_refused: told the reason of each refused request (the metric).
    """

    def __init__(
        self,
        app: Asgi,
        *,
        service: McpService,
        checker: signing.Checker,
        wall_ms: Callable[[], int],
        max_body_bytes: int,
        body_timeout_s: float,
        on_refused: Callable[[str], None] | None = None,
    ) -> None:
        self.app = app
        self._service = service
        self._checker = checker
        self._wall_ms = wall_ms
        self._max_body = max_body_bytes
        self._body_s = body_timeout_s
        self._on_refused = on_refused

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") != PATH:
            await self.app(scope, receive, send)
            return
        resp = await self._answer(scope, receive)
        if resp is None:
            return  # the sender left before its body came whole
        if resp.stream is not None:
            await respond_stream(send, receive, resp)
        else:
            await respond(send, resp)

    async def _answer(self, scope: Scope, receive: Receive) -> HttpResponse | None:
        headers = header_lists(scope.get("headers", ()))
        try:
            body = await read_body(receive, self._max_body, self._body_s)
        except BodyTooLarge:
            return _refusal(413, "Request body too large")
        except BodyTooSlow:
            return _refusal(408, "Request body not received in time")
        except BodyGone:
            return None
        method = str(scope.get("method", "POST"))
        try:
            signed = self._checker.check(method, PATH, headers, body, self._wall_ms())
        except signing.MeshRefused as exc:
            client = scope.get("client") or ("", 0)
            log.warning(
                "internal listener refused a request from %s (%s): %s",
                client[0],
                exc.reason,
                exc.words,
            )
            if self._on_refused is not None:
                self._on_refused(exc.reason)
            return _refusal(403, f"Forwarded request refused: {exc.words}")
        covered = dict(signed.headers)  # only what the sender signed: none added on the way
        budget_s = deadline.parse_budget(covered.pop(deadline.BUDGET, None))

        async def read() -> bytes:
            return body

        req = HttpRequest(
            method,
            covered,
            read,
            len(body),
            remote=signed.sender,
            mesh_epoch=signed.epoch,
            token_digest=signed.token_digest,
            budget_s=budget_s,
        )
        try:
            return await self._service.handle(req)
        except StoreError as exc:
            log.warning("forwarded /mcp refused: %s", exc)
            return store_unavailable()
