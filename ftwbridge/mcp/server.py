"""The `/mcp` endpoint's logic, independent of the HTTP framework (PROTOCOL.md part D).

`McpService.handle(request)` takes an `HttpRequest` (method, lower-cased headers, a body
reader) and returns an `HttpResponse`. It checks, in order: the HTTP method (405, `Allow:
POST`), `Content-Type` (415), `Accept` (406), the declared body size (413), the bearer token
(401 with `WWW-Authenticate` and `resource_metadata`, RFC 9728 section 5.1), then the body
(read within the size and time bounds by the caller's reader), `inbound.classify`, and the
method, which `dispatch.Dispatcher` answers. Tool failures are `isError` results in words;
protocol faults are JSON-RPC errors.

Every request that reaches `handle` leaves one audit line (logger `ftwbridge.audit`) and one
`on_request(method, outcome)` sample, refusals included (docs/operations.md, "Logs"): a tool call's line
starts `tool=`, any other request's `method=`; `status` is `ok`, the refusal's word
(`audit.OUTCOMES`), or a box's registry code.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

import trio

from ftwbridge.store import TokenRecord

from . import deadline, inbound
from .affinity import named_holder
from .audit import Recorder, Seen, method_label
from .auth import BearerAuth, Unauthorized
from .consent import ConfirmMode
from .control import Control, ControlPort
from .dispatch import Dispatcher, ListenPort
from .forwarding import MESH_MOVED, MeshPort, forward, not_held
from .hello import INSTRUCTIONS as INSTRUCTIONS
from .http import (
    RATE_LIMITED_JSONRPC,
    BodyGone,
    BodyTooLarge,
    BodyTooSlow,
    HttpRequest,
    HttpResponse,
    Write,
    gate_headers,
    json_response,
    late,
    read_body,
)
from .limits import AgentRequests
from .runner import LivePort, ToolRunner

__all__ = [
    "MESH_MOVED",
    "RATE_LIMITED_JSONRPC",
    "BodyGone",
    "BodyTooLarge",
    "BodyTooSlow",
    "HomePort",
    "HttpRequest",
    "HttpResponse",
    "ListenPort",
    "LivePort",
    "McpService",
    "MeshPort",
    "Write",
]
"""The request and response types, the 421's header and the ports stay importable from here
(`mcp/http.py`, `mcp/forwarding.py`, `mcp/runner.py` hold them)."""


HomePort = ControlPort
"""What `/mcp` needs of the rest of the bridge (the pool and the rosters): reads, grants and
commands (`mcp/control.py`)."""


class McpService:
    """`/mcp` for one bridge.

    Args:
        homes: the port to the pool and rosters.
        verify_token: bearer token text -> its record, or None when unknown or expired.
        resource: this endpoint's public URL (the token audience, RFC 8707).
        resource_metadata: the URL of our RFC 9728 metadata.
        max_body_bytes: the body bound (413 past it).
        call_deadline_s: one tool call, end to end.
        wall_ms: the bridge's wall clock, ms since the epoch.
        http_burst, http_per_s: the per-agent request limit (requests, requests per second).
        on_call: told (tool, outcome, seconds) after each tool call (metrics), if given.
        on_request: told (method, outcome) after each request (metrics), if given.
        roster_behind: (home, agent key) -> a `RosterBehind`-like value with `box_seq` and
            `held_seq` when the home's box sent an older roster that does not list the agent
            (`Rosters.roster_behind`), else None; such a call is refused in words at once.
        anonymous_token: the test profile's token for requests without one (never in production).
        confirm_ttl_s: how long a person has to confirm a charge where the client can ask
            (MCP 2026-07-28 elicitation), seconds; None sends commands without asking.
        confirm_mode: `confirm_commands` (`mcp/consent.py`): how the person is asked.
        mesh: forwarding to the instance that holds a token's home, if this is one of many.
        clock_skew_ms: how far a box's clock may run from ours (ms); an energy report starts
            that much inside the grant's `history_days`, so a box ahead of us never refuses it.
        listen: `subscriptions/listen` streams (2026-07-28), if served.
        live: the pool's live feeds: a `live.get` read (the `status` tool, the `live`
            resource, the home view) is answered from a fresh feed without a box read.
        verify_digest: a token's SHA-256 -> its record, or None: how a forwarded request's
            token (sent as its digest) is looked up.
        holder: home -> this instance's id while it holds the home's uplink, else None; an
            answer to such a home's token names it in `affinity.HOLDER_HEADER`, for the
            balancer (docs/operations.md, "Calls at the holder").
    """

    def __init__(
        self,
        *,
        homes: HomePort,
        verify_token: Callable[[str], Awaitable[TokenRecord | None]],
        resource: str,
        resource_metadata: str,
        max_body_bytes: int,
        call_deadline_s: float,
        wall_ms: Callable[[], int],
        http_burst: float = 30,
        http_per_s: float = 10,
        on_call: Callable[[str, str, float], None] | None = None,
        on_request: Callable[[str, str], None] | None = None,
        roster_behind: Callable[[str, bytes], Any] | None = None,
        anonymous_token: str | None = None,
        confirm_ttl_s: float | None = 120.0,
        confirm_mode: ConfirmMode = "elicit",
        mesh: MeshPort | None = None,
        clock_skew_ms: int = 300_000,
        listen: ListenPort | None = None,
        verify_digest: Callable[[bytes], Awaitable[TokenRecord | None]] | None = None,
        live: LivePort | None = None,
        holder: Callable[[str], str | None] | None = None,
    ) -> None:
        self._homes = homes
        self._holder = holder
        self._mesh = mesh
        self._control = Control(
            homes=homes,
            wall_ms=wall_ms,
            call_deadline_s=call_deadline_s,
            confirm_ttl_s=confirm_ttl_s,
            confirm_mode=confirm_mode,
        )
        self._auth = BearerAuth(
            verify_token=verify_token,
            grant=homes.grant,
            resource=resource,
            resource_metadata=resource_metadata,
            wall_ms=wall_ms,
            anonymous_token=anonymous_token,
            verify_digest=verify_digest,
        )
        self._max_body = max_body_bytes
        self._deadline_s = call_deadline_s
        self._requests = AgentRequests(http_burst, http_per_s)
        self._recorder = Recorder(on_call, on_request)
        self._dispatch = Dispatcher(
            control=self._control,
            runner=ToolRunner(homes=homes, wall_ms=wall_ms, clock_skew_ms=clock_skew_ms, live=live),
            challenge=self._auth.challenge,
            roster_behind=roster_behind,
            listen=listen,
            live=live,
        )
        """The methods, once the gates, the token and forwarding let a request through."""

    def _http_limit(self, token: TokenRecord, rid: str | int | None) -> HttpResponse | None:
        """The per-agent request limit at `/mcp` (`http_burst` in a row, then `http_per_s`):
        past it, 429 with `Retry-After` (whole seconds) and a JSON-RPC error with the id."""
        wait_ms = self._requests.take((token.home, token.agent_key), trio.current_time())
        if wait_ms is None:
            return None
        rej = inbound.Rejection(
            429, RATE_LIMITED_JSONRPC, "Too many requests", rid, {"retryAfterMs": wait_ms}
        )
        return json_response(
            429, rej.body(), {"retry-after": str(max(1, math.ceil(wait_ms / 1000)))}
        )

    def refused_at_edge(self, outcome: str, status: int, headers: dict[str, list[str]]) -> None:
        """Audit and count a request the HTTP shell refused before `handle` (a foreign
        Origin, 403; an unknown Host, 421; the edge's framing and coding rules, 400 and 415):
        `outcome` is a word of `OUTCOMES`."""
        self._recorder.record(Seen(outcome=outcome), status, headers, 0.0)

    async def handle(self, req: HttpRequest) -> HttpResponse:
        """Answer one request to `/mcp` (never raises for bad input); audit and count it.

        Every bound counts from this call's start (`deadline`): the work is cut at
        `work_ends`, and whatever is still under way `call_deadline_s` after the start (a
        token check the database holds up) ends in a 503 in words (audited `late`)."""
        seen = Seen()
        started = time.monotonic()
        now = trio.current_time()
        ends = deadline.work_ends(now, self._deadline_s, req.budget_s)
        status = 0
        try:
            with trio.move_on_at(now + self._deadline_s) as net:
                resp = await self._handle(req, seen, ends)
            if net.cancelled_caught:
                seen.outcome = "late"
                resp = late()
            if self._holder is not None and seen.token is not None:
                resp = named_holder(resp, self._holder(seen.token.home))
            status = resp.status
            seen.delivered = not req.client_gone()
            return resp
        except trio.Cancelled:
            seen.outcome = "cancelled"
            raise
        except BaseException:
            seen.outcome = "error"
            raise
        finally:
            self._recorder.record(seen, status, req.headers, time.monotonic() - started)

    async def _handle(self, req: HttpRequest, seen: Seen, ends: float) -> HttpResponse:
        """The gates in order (module docstring), then forwarding, the per-agent limit and
        the method, the work cut at `ends` (trio time); `seen` gathers what the audit line
        says."""
        refused = gate_headers(req, self._max_body, seen)
        if refused is not None:
            return refused
        token = await self._auth.authenticate(
            req.headers.get("authorization", []), digest=req.token_digest
        )
        if isinstance(token, Unauthorized):
            seen.outcome = "unauthorized"
            return json_response(401, token.body, token.headers)
        seen.token = token
        moved = await not_held(self._mesh, req, token, seen)
        if moved is not None:
            return moved
        body = await read_body(req, seen)
        if isinstance(body, HttpResponse):
            return body
        route = inbound.classify(req.headers, body)
        if not isinstance(route, inbound.Rejection):
            seen.method = method_label(route.method)
        if self._mesh is not None:  # a forward's hop gets what is left until `ends`
            forwarded = replace(req, work_ends=ends)
            sent = await forward(self._mesh, forwarded, token, route, body, seen)
            if sent is not None:
                return sent
        limited = self._http_limit(
            token, None if isinstance(route, inbound.Rejection) else route.id
        )
        if limited is not None:
            seen.outcome = "rate_limited"
            return limited
        if isinstance(route, inbound.Rejection):
            seen.outcome = "protocol_error"
            return json_response(route.status, route.body())
        if route.is_notification:
            seen.outcome = "notification"
            return HttpResponse(202)
        return await self._dispatch.dispatch(route, token, req.headers, ends, seen)
