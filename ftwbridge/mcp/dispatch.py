"""`/mcp`'s methods, once a request passed the HTTP gates, its token and forwarding
(`server.McpService`): the server's own answers (`hello.py`), `tools/list`, `tools/call`
(the argument checks, then a read through `ToolRunner` or a command through `Control`),
resources and prompts (`catalog.py`), the home view's live tool (`apps.py`) and
`subscriptions/listen`. Tool failures are `isError` results in words; protocol faults are
JSON-RPC errors (MCP tools, "Error Handling"). Each step writes what the audit line says
into the request's `Seen`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, Protocol

from mcp_types import jsonrpc
from pydantic import ValidationError

from ftwbridge.proto.refusal import Refusal
from ftwbridge.store import TokenRecord

from . import apps, inbound
from .args import NoArgs
from .audit import Seen
from .catalog import METHODS, Catalog
from .confirm import StateRefused
from .control import ArgumentsRefused, Control, InputRequired
from .control_tools import CONTROL_BY_NAME, CONTROL_TOOLS, ControlTool
from .forwarding import is_listen
from .hello import hello, tools_list
from .http import HttpResponse, json_response
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

NO_ARGS: Final = NoArgs()
"""What `NoArgs.model_validate({})` gives at every call (a frozen model without fields), made
once: a tool without arguments called with none skips pydantic (about 8 k instructions)."""
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


class Dispatcher:
    """The methods of `/mcp` for one bridge (module docstring).

    Args:
        control: runs commands (`mcp/control.py`).
        runner: runs reads (`mcp/runner.py`).
        challenge: the `WWW-Authenticate` value of a 403 for step-up (`BearerAuth.challenge`).
        roster_behind: as `McpService`'s.
        listen: `subscriptions/listen`, if served.
        live: the pool's live feeds, if any (the home view's lease).
    """

    def __init__(
        self,
        *,
        control: Control,
        runner: ToolRunner,
        challenge: Callable[[str, str, str], str],
        roster_behind: Callable[[str, bytes], Any] | None,
        listen: ListenPort | None,
        live: LivePort | None,
    ) -> None:
        self._control = control
        self._run = runner.run
        self._challenge = challenge
        self._roster_behind = roster_behind
        self._listen = listen
        self._live = live
        self._tool_list = [t.definition() for t in TOOLS] + [t.definition() for t in CONTROL_TOOLS]
        self._catalog = Catalog(run=self._run, behind=self._behind)
        self._view_cache = apps.ViewCache()
        specs: tuple[ToolSpec | ControlTool, ...] = (*TOOLS, *CONTROL_TOOLS)
        self._scopes = {t.name: tuple(s.value for s in t.scopes) for t in specs}
        """Each tool's scope words (`ToolSpec.scopes` works them out at every ask)."""

    async def dispatch(
        self,
        route: inbound.Route,
        token: TokenRecord,
        headers: dict[str, list[str]],
        ends: float,
        seen: Seen,
    ) -> HttpResponse:
        """Answer request `route` of `token`'s agent, its work cut at `ends` (trio's clock)."""
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
        missing = [s for s in self._scopes[name] if s not in token.scopes]
        if missing:
            seen.outcome = "insufficient_scope"
            return self._insufficient_scope(route, name, missing)
        try:
            if isinstance(spec, ControlTool):
                args = spec.parse(arguments)
            elif spec.args is NoArgs and not arguments:
                args = NO_ARGS
            else:
                args = spec.args.model_validate(arguments)
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
        return insufficient_scope(route, name, missing, self._challenge)

    def _behind(self, token: TokenRecord) -> Any:
        if self._roster_behind is None:
            return None
        return self._roster_behind(token.home, token.agent_key)
