"""The `/mcp` endpoint's logic, independent of the HTTP framework (PROTOCOL.md part D).

`McpService.handle(request)` takes an `HttpRequest` (method, lower-cased headers, a body
reader) and returns an `HttpResponse`. It checks, in order: the HTTP method (405, `Allow:
POST`), `Content-Type` (415), `Accept` (406), the declared body size (413), the bearer token
(401 with `WWW-Authenticate` and `resource_metadata`, RFC 9728 section 5.1), then the body
(read within the size and time bounds by the caller's reader), `inbound.classify`, and the
method. Tool failures are `isError` results in words; protocol faults are JSON-RPC errors.

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
from typing import Any, Final, Protocol

import trio
from mcp_types import jsonrpc
from pydantic import ValidationError

from ftwbridge.proto.refusal import Refusal
from ftwbridge.store import TokenRecord

from . import apps, deadline, inbound
from .affinity import named_holder
from .audit import Recorder, Seen, method_label
from .auth import BearerAuth, Unauthorized
from .catalog import METHODS, Catalog
from .confirm import StateRefused
from .consent import ConfirmMode
from .control import ArgumentsRefused, Control, ControlPort, InputRequired
from .control_tools import CONTROL_BY_NAME, CONTROL_TOOLS, ControlTool
from .forwarding import MESH_MOVED, MeshPort, forward, is_listen, not_held
from .hello import INSTRUCTIONS as INSTRUCTIONS
from .hello import hello, tools_list
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
from .replies import error_response, insufficient_scope, result_response
from .results import (
    invalid_arguments,
    log_safe,
    refusal_result,
    roster_behind_result,
    text_error,
)
from .runner import LivePort, ToolRunner
from .tools import TOOLS, TOOLS_BY_NAME, ToolSpec

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


VIEW_LEASE_S: Final = 30.0
"""How long one call of the home view's live tool keeps its feed up (seconds): a view polls
every few seconds while shown (`mcp/view/home.html`), so the feed ends about this long after
the view is hidden or torn down."""


class ListenPort(Protocol):
    """`subscriptions/listen` (`mcp/listen.py`, docs/live.md)."""

    async def open(
        self, route: inbound.Route, token: TokenRecord, headers: dict[str, list[str]]
    ) -> HttpResponse:
        """A stream's response, or a refusal as an ordinary JSON error."""


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
        self._live = live
        self._mesh = mesh
        self._listen = listen
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
        self._wall_ms = wall_ms
        self._tool_list = [t.definition() for t in TOOLS] + [t.definition() for t in CONTROL_TOOLS]
        self._requests = AgentRequests(http_burst, http_per_s)
        self._recorder = Recorder(on_call, on_request)
        self._roster_behind = roster_behind
        self._runner = ToolRunner(
            homes=homes, wall_ms=wall_ms, clock_skew_ms=clock_skew_ms, live=live
        )
        self._run = self._runner.run
        self._catalog = Catalog(run=self._run, behind=self._behind)
        self._view_cache = apps.ViewCache()

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
        req = replace(req, work_ends=deadline.work_ends(now, self._deadline_s, req.budget_s))
        status = 0
        try:
            with trio.move_on_at(now + self._deadline_s) as net:
                resp = await self._handle(req, seen)
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

    async def _handle(self, req: HttpRequest, seen: Seen) -> HttpResponse:
        """The gates in order (module docstring), then forwarding, the per-agent limit and
        the method; `seen` gathers what the audit line says."""
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
        sent = await forward(self._mesh, req, token, route, body, seen)
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
        return await self._dispatch(route, token, req.headers, req.work_ends, seen)

    async def _dispatch(
        self,
        route: inbound.Route,
        token: TokenRecord,
        headers: dict[str, list[str]],
        ends: float,
        seen: Seen,
    ) -> HttpResponse:
        m = route.method
        answer = hello(route, listen=self._listen is not None)
        if answer is not None:
            return answer
        if m == "tools/list":
            return tools_list(route, self._tool_list, seen)
        if m == "tools/call":
            return await self._call(route, token, ends, seen)
        if m in METHODS:  # resources and prompts (mcp/catalog.py)
            ans = await self._catalog.answer(route, token, ends)
            seen.outcome = ans.outcome
            if ans.missing:
                return self._insufficient_scope(route, ans.name, list(ans.missing))
            if ans.error is not None:
                return error_response(route, *ans.error)
            assert ans.result is not None
            return result_response(route, ans.result, ans.ttl_ms is not None, ans.ttl_ms or 0)
        if is_listen(route) and self._listen is not None:
            resp = await self._listen.open(route, token, headers)
            if resp.stream is None:
                seen.outcome = "listen_refused"
            return resp
        seen.outcome = "method_not_found"
        return error_response(route, jsonrpc.METHOD_NOT_FOUND, "Method not found", m)

    async def _call(
        self, route: inbound.Route, token: TokenRecord, ends: float, seen: Seen
    ) -> HttpResponse:
        name = route.params.get("name")
        arguments = route.params.get("arguments", {})
        if not isinstance(name, str) or not isinstance(arguments, dict):
            seen.outcome = "invalid_params"
            return error_response(
                route, jsonrpc.INVALID_PARAMS, "tools/call needs a text name and object arguments"
            )
        if name == apps.LIVE_TOOL:  # the home view's app-only tool (mcp/apps.py)
            return await self._call_live(route, token, arguments, ends, seen)
        spec: ToolSpec | ControlTool | None = TOOLS_BY_NAME.get(name) or CONTROL_BY_NAME.get(name)
        if spec is None:  # a protocol error (MCP tools, "Error Handling"): not a tool's result
            seen.outcome = "unknown_tool"
            return error_response(
                route,
                jsonrpc.INVALID_PARAMS,
                f"Unknown tool: {log_safe(name[:64])}",
                {"tools": sorted([*TOOLS_BY_NAME, *CONTROL_BY_NAME])},
            )
        seen.tool = name
        missing = [s.value for s in spec.scopes if s.value not in token.scopes]
        if missing:
            seen.outcome = "insufficient_scope"
            return self._insufficient_scope(route, name, missing)
        try:
            args = (
                spec.parse(arguments)
                if isinstance(spec, ControlTool)
                else spec.args.model_validate(arguments)
            )
        except ValidationError as exc:
            seen.outcome = "invalid_arguments"
            return result_response(route, invalid_arguments(name, exc))
        answered_here = isinstance(spec, ToolSpec) and spec.run is not None
        behind = None if answered_here else self._behind(token)
        if behind is not None:
            seen.outcome = "roster_behind"
            return result_response(route, roster_behind_result(behind))
        return await self._execute(spec, args, token, route, ends, seen)

    async def _call_live(
        self,
        route: inbound.Route,
        token: TokenRecord,
        arguments: dict[str, Any],
        ends: float,
        seen: Seen,
    ) -> HttpResponse:
        """The home view's app-only live tool (`mcp/apps.py`): a call from a shown view keeps
        the agent's live feed up for `VIEW_LEASE_S`."""
        seen.tool = apps.LIVE_TOOL
        if self._live is not None and apps.wants_view(route.params):
            self._live.lease(token.home, token.agent_key, VIEW_LEASE_S)
        live = await apps.answer_live(
            route.params, token, arguments, self._view_cache, self._run, self._behind, ends
        )
        seen.outcome = live.outcome
        if live.missing:
            return self._insufficient_scope(route, apps.LIVE_TOOL, list(live.missing))
        return result_response(route, live.result)

    async def _execute(
        self,
        spec: ToolSpec | ControlTool,
        args: Any,
        token: TokenRecord,
        route: inbound.Route,
        ends: float,
        seen: Seen,
    ) -> HttpResponse:
        """Run a checked call: a command through `Control` (which may first ask the person),
        a read through the runner; a refusal becomes the tool's result in words."""
        result: dict[str, Any]
        try:
            if isinstance(spec, ControlTool):
                out = await self._control.run(spec, args, token, route, ends=ends)
                if isinstance(out, InputRequired):
                    seen.outcome = "input_required"
                    return json_response(
                        200, {"jsonrpc": "2.0", "id": route.id, "result": out.result()}
                    )
                result = out
            else:
                result = await self._run(spec, args, token, ends)
        except ArgumentsRefused as exc:
            seen.outcome = "invalid_arguments"
            return result_response(route, text_error(str(exc)))
        except StateRefused as exc:
            seen.outcome = "invalid_params"
            return error_response(route, jsonrpc.INVALID_PARAMS, f"Invalid params: {exc}")
        except Refusal as exc:
            sent = exc.code
            result = refusal_result(exc)  # cleans the peer's code: one that was not a code's
            seen.outcome = exc.code if exc.code == sent else "other"  # shape is `other`
        return result_response(route, result)

    def _insufficient_scope(
        self, route: inbound.Route, name: str, missing: list[str]
    ) -> HttpResponse:
        """403 `insufficient_scope` for step-up (`replies.insufficient_scope`)."""
        return insufficient_scope(route, name, missing, self._auth.challenge)

    def _behind(self, token: TokenRecord) -> Any:
        if self._roster_behind is None:
            return None
        return self._roster_behind(token.home, token.agent_key)
