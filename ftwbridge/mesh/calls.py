"""Forwarded `/mcp` requests answered at the holder (docs/architecture.md, "When the home's
uplink is at another instance"; the internal listener that carries them: `mesh/listener.py`).

`ForwardedCalls` takes each whole request for `/mcp` (its body already within the listener's
bounds, 413 and 408), checks the mesh headers (`signing.Checker`: anything unsigned, forged,
misaddressed, stale or replayed is 403 in words, one log line, one count), then calls
`McpService.handle` with only the headers the signature covers, marked with the sender's epoch
(so the token is checked again in full, the per-agent limits and the home's pacing apply here,
and a home no longer held at that epoch is answered 421, which only the sender sees). Its
answer is whole, or a stream (`HttpResponse.stream`: a forwarded `subscriptions/listen`,
docs/live.md "Many instances") that the listener cancels when the sending instance hangs up,
which it does when its client does.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from ftwbridge.mcp import deadline
from ftwbridge.mcp.asgi import store_unavailable
from ftwbridge.mcp.server import HttpRequest, HttpResponse, McpService
from ftwbridge.store import StoreError

from . import signing
from .forward import PATH
from .wire import Request, refusal_body

log = logging.getLogger("ftwbridge.mesh")


def refusal(status: int, words: str) -> HttpResponse:
    """A JSON-RPC error answer (id null, -32600) with `status` and `words`."""
    return HttpResponse(status, {"content-type": "application/json"}, refusal_body(words, PATH))


class ForwardedCalls:
    """The internal listener's `/mcp` route (see the module).

    Args:
        service: this instance's `/mcp` service.
        checker: checks the mesh headers (it remembers nonces).
        wall_ms: the wall clock, ms since the Unix epoch.
        on_refused: told the reason of each refused request (the metric).
    """

    __slots__ = ("_checker", "_on_refused", "_service", "_wall_ms")

    def __init__(
        self,
        *,
        service: McpService,
        checker: signing.Checker,
        wall_ms: Callable[[], int],
        on_refused: Callable[[str], None] | None = None,
    ) -> None:
        self._service = service
        self._checker = checker
        self._wall_ms = wall_ms
        self._on_refused = on_refused

    async def __call__(self, request: Request, peer: str) -> HttpResponse:
        """The answer to one whole request from `peer` (its address, for the log); raises
        nothing for what the request holds."""
        body = request.body
        try:
            signed = self._checker.check(
                request.method, PATH, request.headers, body, self._wall_ms()
            )
        except signing.MeshRefused as exc:
            log.warning(
                "internal listener refused a request from %s (%s): %s", peer, exc.reason, exc.words
            )
            if self._on_refused is not None:
                self._on_refused(exc.reason)
            return refusal(403, f"Forwarded request refused: {exc.words}")
        covered = dict(signed.headers)  # only what the sender signed: none added on the way
        budget_s = deadline.parse_budget(covered.pop(deadline.BUDGET, None))

        async def read() -> bytes:
            return body

        req = HttpRequest(
            request.method,
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
