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

import json
import logging
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any, Final, Protocol

import trio
from mcp_types import jsonrpc
from pydantic import ValidationError

from ftwbridge.proto.clean import to_json
from ftwbridge.proto.names import Answer, Cap, Code, Read
from ftwbridge.proto.refusal import Refusal
from ftwbridge.proto.registry import CAPS
from ftwbridge.proto.session import Reply
from ftwbridge.store import TokenRecord

from . import apps, deadline, inbound
from .audit import Recorder, Seen, method_label
from .auth import BearerAuth, Unauthorized
from .capabilities import capabilities
from .catalog import METHODS, Catalog
from .confirm import StateRefused
from .consent import ConfirmMode
from .control import ArgumentsRefused, Control, ControlPort, InputRequired
from .control_tools import CONTROL_BY_NAME, CONTROL_TOOLS, ControlTool
from .energy_tools import AnswerCache, FlowContext, cached
from .identity import SERVER_INFO
from .limits import AgentRequests
from .results import (
    conforms,
    invalid_arguments,
    log_safe,
    ok_result,
    refusal_result,
    roster_behind_result,
    text_error,
)
from .tools import TOOLS, TOOLS_BY_NAME, ToolContext, ToolSpec

RATE_LIMITED_JSONRPC = -32029
"""JSON-RPC code of a 429 (implementation-defined server error range, JSON-RPC 2.0 section 5.1)."""
INSTRUCTIONS = (
    "Access to one home's energy box: live power, plan, prices, history, health; within the"
    " owner's grant, start and stop a charge, and ask the owner for lasting changes."
)


HomePort = ControlPort
"""What `/mcp` needs of the rest of the bridge (the pool and the rosters): reads, grants and
commands (`mcp/control.py`)."""


MESH_MOVED = "ftw-mesh-moved"
"""The header of the 421 a holder answers a forwarding instance when it no longer holds the
home at the epoch named (docs/architecture.md, "When the home's uplink is at another
instance"); a client never sees it."""


class MeshPort(Protocol):
    """What `/mcp` needs of the mesh between instances (`ftwbridge.mesh`; docs/operations.md, "Many instances")."""

    async def holds(self, home: str, epoch: int) -> bool:
        """Whether this instance holds `home`'s uplink at the claim `epoch` now (a claim
        under way is waited for briefly)."""

    async def forward(
        self, home: str, req: HttpRequest, body: bytes, rid: str | int | None
    ) -> HttpResponse | Refusal | None:
        """Send the request to `home`'s holder if that is another instance: its answer, a
        `Refusal` when the holder failed, or None to answer here."""

    async def forward_stream(
        self, home: str, req: HttpRequest, body: bytes, rid: str | int | None
    ) -> HttpResponse | None:
        """A `subscriptions/listen` served from `home`'s holder if that is another instance:
        a response that relays its stream, or None to answer here."""


@dataclass(frozen=True, slots=True)
class HttpRequest:
    """One HTTP request: method, headers (lower-case name -> every value), declared length,
    and `read_body()`, which raises `BodyTooLarge` or `BodyTooSlow`."""

    method: str
    headers: dict[str, list[str]]
    read_body: Callable[[], Awaitable[bytes]]
    content_length: int | None = None
    remote: str = ""
    """The client's address (behind trusted proxies, the client's), or the forwarding
    instance's id; `forward` is given the agent instead (the entry's coarse guard)."""
    mesh_epoch: int | None = None
    """Set on a request another instance forwarded (`ftwbridge.mesh`): the epoch at which
    the sender believed this instance holds the token's home."""
    token_digest: bytes | None = None
    """On a forwarded request: the SHA-256 of the bearer token the sender verified, sent in
    its place (the token itself never crosses the hop)."""
    budget_s: float | None = None
    """Set on a forwarded request: the time its sender left for it, seconds from its
    arrival (`deadline.BUDGET`); it can only shorten `call_deadline_s`."""
    work_ends: float = math.inf
    """When the call's work is cut, trio time (`deadline.work_ends`: set by `handle` from
    the call's start; a forward's hop gets what is left of it)."""
    client_gone: Callable[[], bool] = lambda: False
    """Whether the client has closed its connection already (asked once the answer is
    ready: an answer nobody will read is audited `delivered=no`, docs/operations.md "Logs")."""


class BodyTooLarge(Exception):
    """The body passed the size bound while being read (413)."""


class BodyTooSlow(Exception):
    """The body did not arrive within the time bound (408)."""


class BodyGone(Exception):
    """The client left before its whole body arrived (audited as `cancelled`; no answer)."""


Write = Callable[[bytes], Awaitable[None]]
"""Writes one piece of a streamed response body (the HTTP shell's)."""


@dataclass(slots=True)
class HttpResponse:
    """Status, headers and body bytes to send; or, with `stream`, a body of unknown length
    that `stream(write)` writes piece by piece until it returns (`subscriptions/listen`).
    The shell cancels `stream` when the client goes away."""

    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    outcome: str | None = None
    """The audit outcome of a response a guard made (`audit.OUTCOMES`), not sent."""
    stream: Callable[[Write], Awaitable[None]] | None = None


class LivePort(Protocol):
    """The pool's live feeds (`pool/feed.py`, PROTOCOL.md part F) as `/mcp` uses them."""

    def live_view(self, home: str, agent_key: bytes) -> dict[str, Any] | None:
        """A fresh `live` answer from a running feed, or None (then the box is read)."""

    def lease(self, home: str, agent_key: bytes, seconds: float) -> None:
        """Keep the (home, agent) feed referenced for `seconds` (starting it if none runs)."""


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


def _json(status: int, value: Any, headers: dict[str, str] | None = None) -> HttpResponse:
    # A lone surrogate a client sent (and we echo, e.g. in an error) becomes a \\uXXXX escape.
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    body = text.encode("utf-8", "backslashreplace")
    return HttpResponse(status, {"content-type": "application/json", **(headers or {})}, body)


LATE_WORDS = "The bridge could not finish this request in time; try again in a few seconds."
"""What a request still under way `call_deadline_s` after its start reads (a 503)."""


def _late() -> HttpResponse:
    rej = inbound.Rejection(503, jsonrpc.INTERNAL_ERROR, LATE_WORDS)
    return _json(503, rej.body(), {"retry-after": "2", "cache-control": "no-store"})


def _refuse_body(status: int, message: str) -> HttpResponse:
    """413 or 408 before the body is read whole: the connection closes, so a client still
    sending stops and reads the answer instead of filling the socket."""
    rej = inbound.Rejection(status, jsonrpc.INVALID_REQUEST, message)
    return _json(status, rej.body(), {"connection": "close"})


def _is_listen(route: inbound.Route | inbound.Rejection) -> bool:
    """A 2026-07-28 `subscriptions/listen` (a stream: forwarded as one, docs/live.md)."""
    return (
        isinstance(route, inbound.Route)
        and route.era == "modern"
        and route.method == "subscriptions/listen"
    )


def _accepts_json(values: list[str]) -> bool:
    if not values:
        return True
    for part in ",".join(values).split(","):
        media = part.split(";")[0].strip().lower()
        if media in ("application/json", "application/*", "*/*", ""):
            return True
    return False


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
    ) -> None:
        self._homes = homes
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
        self._answers = AnswerCache()
        self._skew_ms = clock_skew_ms
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
        return _json(429, rej.body(), {"retry-after": str(max(1, math.ceil(wait_ms / 1000)))})

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
                resp = _late()
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
        if req.method != "POST":
            seen.outcome = "method_not_allowed"
            return HttpResponse(405, {"allow": "POST"})
        ctype = (req.headers.get("content-type") or [""])[0].split(";")[0].strip().lower()
        if ctype != "application/json":
            seen.outcome = "bad_media_type"
            return _json(
                415,
                inbound.Rejection(
                    415, jsonrpc.INVALID_REQUEST, "Content-Type must be application/json"
                ).body(),
            )
        if not _accepts_json(req.headers.get("accept", [])):
            seen.outcome = "not_acceptable"
            return _json(
                406,
                inbound.Rejection(
                    406, jsonrpc.INVALID_REQUEST, "Accept must allow application/json"
                ).body(),
            )
        if req.content_length is not None and req.content_length > self._max_body:
            seen.outcome = "body_too_large"
            return _refuse_body(413, "Request body too large")
        token = await self._auth.authenticate(
            req.headers.get("authorization", []), digest=req.token_digest
        )
        if isinstance(token, Unauthorized):
            seen.outcome = "unauthorized"
            return _json(401, token.body, token.headers)
        seen.token = token
        if req.mesh_epoch is not None and (
            self._mesh is None or not await self._mesh.holds(token.home, req.mesh_epoch)
        ):
            seen.outcome = "moved"
            return HttpResponse(421, {MESH_MOVED: "1"})
        try:
            body = await req.read_body()
        except BodyTooLarge:
            seen.outcome = "body_too_large"
            return _refuse_body(413, "Request body too large")
        except BodyTooSlow:
            seen.outcome = "body_too_slow"
            return _refuse_body(408, "Request body not received in time")
        except BodyGone:
            seen.outcome = "cancelled"
            return _refuse_body(400, "Request body incomplete")
        route = inbound.classify(req.headers, body)
        if not isinstance(route, inbound.Rejection):
            seen.method = method_label(route.method)
        if req.mesh_epoch is None and self._mesh is not None and _is_listen(route):
            assert isinstance(route, inbound.Route)
            relayed = await self._mesh.forward_stream(token.home, req, body, route.id)
            if relayed is not None:
                seen.outcome = "forwarded"
                return relayed
        elif req.mesh_epoch is None and self._mesh is not None:
            rid = None if isinstance(route, inbound.Rejection) else route.id
            who = replace(req, remote=f"agent {token.home} {token.agent_id}")  # the guard's key
            sent = await self._mesh.forward(token.home, who, body, rid)
            if isinstance(sent, HttpResponse):
                seen.outcome = sent.outcome or "forwarded"
                return sent
            if (
                sent is not None
                and isinstance(route, inbound.Route)
                and route.method == "tools/call"
            ):
                seen.outcome = sent.code
                return self._result(route, refusal_result(sent))
        limited = self._http_limit(
            token, None if isinstance(route, inbound.Rejection) else route.id
        )
        if limited is not None:
            seen.outcome = "rate_limited"
            return limited
        if isinstance(route, inbound.Rejection):
            seen.outcome = "protocol_error"
            return _json(route.status, route.body())
        if route.is_notification:
            seen.outcome = "notification"
            return HttpResponse(202)
        return await self._dispatch(route, token, req.headers, req.work_ends, seen)

    def _result(
        self,
        route: inbound.Route,
        result: dict[str, Any],
        cacheable: bool = False,
        ttl_ms: int = 0,
    ) -> HttpResponse:
        if route.era == "modern":
            result = result | {"resultType": "complete"}
            if cacheable:
                result |= {"ttlMs": ttl_ms, "cacheScope": "private"}
        return _json(200, {"jsonrpc": "2.0", "id": route.id, "result": result})

    def _error(
        self, route: inbound.Route, code: int, message: str, data: Any = None
    ) -> HttpResponse:
        rej = inbound.Rejection(inbound.HTTP_STATUS.get(code, 200), code, message, route.id, data)
        status = rej.status if route.era == "modern" or code != jsonrpc.METHOD_NOT_FOUND else 200
        return _json(status, rej.body())

    async def _dispatch(
        self,
        route: inbound.Route,
        token: TokenRecord,
        headers: dict[str, list[str]],
        ends: float,
        seen: Seen,
    ) -> HttpResponse:
        m = route.method
        if route.era == "modern" and m == "server/discover":
            result = {
                "supportedVersions": list(inbound.MODERN),
                "capabilities": capabilities("modern", listen=self._listen is not None),
                "instructions": INSTRUCTIONS,
                "_meta": {"io.modelcontextprotocol/serverInfo": SERVER_INFO},
            }
            return self._result(route, result, cacheable=True)
        if route.era == "legacy" and m == "initialize":
            asked = route.params.get("protocolVersion")
            version = asked if asked in inbound.LEGACY else inbound.LEGACY[-1]
            result = {
                "protocolVersion": version,
                "capabilities": capabilities("legacy", listen=self._listen is not None),
                "serverInfo": SERVER_INFO,
                "instructions": INSTRUCTIONS,
            }
            return self._result(route, result)
        if route.era == "legacy" and m == "ping":
            return self._result(route, {})
        if m == "tools/list":
            cursor = route.params.get("cursor")
            if cursor is not None:  # one page holds every tool: no cursor was ever issued
                seen.outcome = "invalid_params"
                return self._error(
                    route,
                    jsonrpc.INVALID_PARAMS,
                    "Invalid params: unknown cursor",
                    {"cursor": "unknown"},
                )
            listed = self._tool_list
            if apps.wants_view(route.params):  # MCP Apps negotiated (mcp/apps.py)
                listed = apps.tool_list(listed)
            return self._result(route, {"tools": listed}, cacheable=True)
        if m == "tools/call":
            return await self._call(route, token, ends, seen)
        if m in METHODS:  # resources and prompts (mcp/catalog.py)
            ans = await self._catalog.answer(route, token, ends)
            seen.outcome = ans.outcome
            if ans.missing:
                return self._insufficient_scope(route, ans.name, list(ans.missing))
            if ans.error is not None:
                return self._error(route, *ans.error)
            assert ans.result is not None
            return self._result(route, ans.result, ans.ttl_ms is not None, ans.ttl_ms or 0)
        if _is_listen(route) and self._listen is not None:
            resp = await self._listen.open(route, token, headers)
            if resp.stream is None:
                seen.outcome = "listen_refused"
            return resp
        seen.outcome = "method_not_found"
        return self._error(route, jsonrpc.METHOD_NOT_FOUND, "Method not found", m)

    async def _call(
        self, route: inbound.Route, token: TokenRecord, ends: float, seen: Seen
    ) -> HttpResponse:
        name = route.params.get("name")
        arguments = route.params.get("arguments", {})
        if not isinstance(name, str) or not isinstance(arguments, dict):
            seen.outcome = "invalid_params"
            return self._error(
                route, jsonrpc.INVALID_PARAMS, "tools/call needs a text name and object arguments"
            )
        if name == apps.LIVE_TOOL:  # the home view's app-only tool (mcp/apps.py)
            seen.tool = name
            if self._live is not None and apps.wants_view(route.params):
                self._live.lease(token.home, token.agent_key, VIEW_LEASE_S)
            live = await apps.answer_live(
                route.params, token, arguments, self._view_cache, self._run, self._behind, ends
            )
            seen.outcome = live.outcome
            if live.missing:
                return self._insufficient_scope(route, name, list(live.missing))
            return self._result(route, live.result)
        spec: ToolSpec | ControlTool | None = TOOLS_BY_NAME.get(name) or CONTROL_BY_NAME.get(name)
        if spec is None:  # a protocol error (MCP tools, "Error Handling"): not a tool's result
            seen.outcome = "unknown_tool"
            return self._error(
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
            return self._result(route, invalid_arguments(name, exc))
        answered_here = isinstance(spec, ToolSpec) and spec.run is not None
        behind = None if answered_here else self._behind(token)
        if behind is not None:
            seen.outcome = "roster_behind"
            return self._result(route, roster_behind_result(behind))
        try:
            if isinstance(spec, ControlTool):
                out = await self._control.run(spec, args, token, route, ends=ends)
                if isinstance(out, InputRequired):
                    seen.outcome = "input_required"
                    return _json(200, {"jsonrpc": "2.0", "id": route.id, "result": out.result()})
                result = out
            else:
                result = await self._run(spec, args, token, ends)
        except ArgumentsRefused as exc:
            seen.outcome = "invalid_arguments"
            return self._result(route, text_error(str(exc)))
        except StateRefused as exc:
            seen.outcome = "invalid_params"
            return self._error(route, jsonrpc.INVALID_PARAMS, f"Invalid params: {exc}")
        except Refusal as exc:
            sent = exc.code
            result = refusal_result(exc)  # cleans the peer's code: one that was not a code's
            seen.outcome = exc.code if exc.code == sent else "other"  # shape is `other`
        return self._result(route, result)

    def _insufficient_scope(
        self, route: inbound.Route, name: str, missing: list[str]
    ) -> HttpResponse:
        """403 `insufficient_scope` naming the scopes the tool `name` (or `name` itself when it
        says what, "resource live" or "prompt troubleshoot") needs, for step-up (RFC 6750 section 3.1; MCP authorization, "Scope
        Challenge Handling")."""
        scope = " ".join(missing)
        what = name if " " in name else f"tool {name}"
        rej = inbound.Rejection(
            403,
            jsonrpc.INVALID_REQUEST,
            f"insufficient_scope: the {what} needs {scope}",
            route.id,
            {"requiredScopes": missing},
        )
        challenge = self._auth.challenge("insufficient_scope", f"The {what} needs {scope}", scope)
        return _json(403, rej.body(), {"www-authenticate": challenge})

    def _behind(self, token: TokenRecord) -> Any:
        if self._roster_behind is None:
            return None
        return self._roster_behind(token.home, token.agent_key)

    async def _flow(
        self, spec: ToolSpec, args: Any, token: TokenRecord, now_ms: int, ends: float
    ) -> dict[str, Any]:
        """A tool whose reads depend on earlier answers, ended by `ends` (trio time, the call's
        `work_ends`, counted from its start); its
        `energy.get` answers are reused per home while they cannot change (`AnswerCache`)."""
        assert spec.flow is not None
        grant = await self._homes.grant(token.home, token.agent_key)
        days = grant.cap(Cap.HISTORY_DAYS) if grant else CAPS[Cap.HISTORY_DAYS].default
        hold = grant.cap(Cap.HOLD_S) if grant else CAPS[Cap.HOLD_S].default

        async def read(r: Read, body: Any) -> Reply:
            return await self._homes.call(token.home, token.agent_key, r, body)

        call = cached(self._answers, token.home, token.agent_key, read, now_ms)
        with trio.move_on_at(ends):
            try:
                value = await spec.flow(call, args, FlowContext(now_ms, days, hold, self._skew_ms))
            except (ValueError, KeyError, TypeError) as exc:  # an answer we cannot read
                logging.getLogger("ftwbridge.mcp").warning(
                    "unreadable answer for %s: %s", spec.name, type(exc).__name__
                )
                raise Refusal(Code.E_BAD_BODY) from exc
            return ok_result(to_json(value))
        raise Refusal(Code.E_UNAVAILABLE, {"reason": "timeout"})

    def _fed(self, token: TokenRecord, read: Read) -> Reply | None:
        """A `live.get` answered from the agent's fresh live feed (PROTOCOL.md part F: the
        feed rebuilds part B's `live` answer from `snap` and deltas), or None: read the box."""
        if read is not Read.LIVE_GET or self._live is None:
            return None
        view = self._live.live_view(token.home, token.agent_key)
        return None if view is None else Reply(0, Answer.LIVE.value, view)

    async def _run(
        self, spec: ToolSpec, args: Any, token: TokenRecord, ends: float
    ) -> dict[str, Any]:
        now_ms = self._wall_ms()
        if spec.run is not None:  # the bridge answers it itself
            grant = await self._homes.grant(token.home, token.agent_key)
            return ok_result(to_json(spec.run(token, grant)))
        if spec.flow is not None:  # reads that follow the answers (energy_tools.py)
            return await self._flow(spec, args, token, now_ms, ends)
        replies: list[Reply] = []
        with trio.move_on_at(ends) as scope:
            for read, body in spec.box_requests(args, now_ms):
                fed = self._fed(token, read)
                if fed is not None:
                    replies.append(fed)
                    continue
                replies.append(await self._homes.call(token.home, token.agent_key, read, body))
        if scope.cancelled_caught:
            raise Refusal(Code.E_UNAVAILABLE, {"reason": "timeout"})
        try:
            value = spec.shape(args, replies, ToolContext(now_ms))
            if not conforms(value, spec.output):
                raise ValueError("the answer does not fit the tool's output schema")
            return ok_result(value)
        except Exception as exc:  # a box answer we cannot read: E_BAD_BODY, in words
            logging.getLogger("ftwbridge.mcp").warning(
                "unreadable answer for %s: %s", spec.name, type(exc).__name__
            )
            raise Refusal(Code.E_BAD_BODY) from exc
