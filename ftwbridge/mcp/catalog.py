"""`resources/*` and `prompts/*` of `/mcp`, both eras (MCP resources and prompts; PROTOCOL.md
part D, "Resources and prompts"; docs/resources.md).

`Catalog.answer(route, token)` decides each request and returns an `Answer` that the service
turns into its HTTP response. A read runs the resource's tool through the service's own tool
path (`run`: the same box read, deadline, cleaned JSON and data note as `tools/call`), so a
resource costs and says exactly what its tool does; every other method reads nothing at the
box. Refusals: an unknown, malformed or foreign URI and an unknown prompt or unusable
arguments are -32602 (a URI's with `data.uri`); a resource or prompt whose tools the token may
not call is 403 `insufficient_scope` for step-up; a box's refusal is -32603 with the refusal
in words and in `data` (a read has no `isError` result to carry it); `resources/subscribe` and
`resources/unsubscribe` are -32601 (`resources.subscribe` is false).
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final

from mcp_types import (
    BlobResourceContents,
    GetPromptResult,
    ListPromptsResult,
    ListResourcesResult,
    ListResourceTemplatesResult,
    ReadResourceResult,
    TextResourceContents,
    jsonrpc,
)
from pydantic import BaseModel, ValidationError

from ftwbridge.proto.refusal import Refusal
from ftwbridge.store import TokenRecord

from . import apps, prompts, resources
from .inbound import Route
from .results import ERROR_META, invalid_arguments, refusal_result, roster_behind_result
from .tools import TOOLS_BY_NAME, ToolSpec

METHODS: Final = frozenset(
    {
        "resources/list",
        "resources/templates/list",
        "resources/read",
        "resources/subscribe",
        "resources/unsubscribe",
        "prompts/list",
        "prompts/get",
    }
)
"""The methods `Catalog.answer` serves."""
INTERNAL_ERROR: Final = -32603
"""JSON-RPC 2.0 section 5.1: a read the box refused (the refusal is in `data`)."""
_WIRE_ONLY: Final = {"ttl_ms", "cache_scope", "result_type"}
"""Result fields the service adds per era (`McpService._result`), never the catalog."""

RunTool = Callable[[ToolSpec, Any, TokenRecord, float], Awaitable[dict[str, Any]]]
"""The service's tool path: (tool, parsed arguments, token, when the call's work ends in trio
time) -> the tool's result (`ok_result`); raises `Refusal`."""


@dataclass(frozen=True, slots=True)
class Answer:
    """One request's answer: a `result` (with `ttl_ms` when cacheable), an `error` (JSON-RPC
    code, message, data), or `missing` scopes (403 for `name`); `outcome` is the audit word."""

    outcome: str = "ok"
    result: dict[str, Any] | None = None
    ttl_ms: int | None = None
    error: tuple[int, str, Any] | None = None
    missing: tuple[str, ...] = ()
    name: str = ""


def _dump(model: BaseModel) -> dict[str, Any]:
    out: dict[str, Any] = model.model_dump(
        by_alias=True, exclude_none=True, mode="json", exclude=_WIRE_ONLY
    )
    return out


def _params_error(outcome: str, message: str, data: Any = None) -> Answer:
    return Answer(outcome, error=(jsonrpc.INVALID_PARAMS, f"Invalid params: {message}", data))


class Catalog:
    """Resources and prompts for the tokens of one bridge.

    Args:
        run: the service's tool path (see `RunTool`).
        behind: token -> a `RosterBehind`-like value when the box's roster is older and does
            not list the agent (`McpService` refuses its box reads), else None.
    """

    def __init__(self, *, run: RunTool, behind: Callable[[TokenRecord], Any]) -> None:
        self._run = run
        self._behind = behind

    async def answer(self, route: Route, token: TokenRecord, ends: float = math.inf) -> Answer:
        """Answer one request whose method is in `METHODS` (never raises for bad input); a
        resource read's box reads end by `ends` (trio time, the call's `work_ends`)."""
        m, params = route.method, route.params
        if m in ("resources/subscribe", "resources/unsubscribe"):
            words = f"Method not found: {m} (resources.subscribe is false; read the resource again)"
            return Answer("method_not_found", error=(jsonrpc.METHOD_NOT_FOUND, words, m))
        if m.endswith("/list") and params.get("cursor") is not None:
            return _params_error("invalid_params", "unknown cursor", {"cursor": "unknown"})
        if m == "resources/list":
            listed = resources.listed(token.home, token.scopes)
            if apps.wants_view(params):  # MCP Apps negotiated: the view too (mcp/apps.py)
                listed.append(apps.listing())
            listing = ListResourcesResult(resources=listed)
            return Answer(result=_dump(listing), ttl_ms=0)
        if m == "resources/templates/list":
            templates = resources.listed_templates(token.home, token.scopes)
            listing_t = ListResourceTemplatesResult(resource_templates=templates)
            return Answer(result=_dump(listing_t), ttl_ms=0)
        if m == "prompts/list":
            listing_p = ListPromptsResult(prompts=prompts.listed(token.scopes))
            return Answer(result=_dump(listing_p), ttl_ms=0)
        if m == "prompts/get":
            return self._prompt(params, token)
        return await self._read(params, token, ends)

    def _prompt(self, params: dict[str, Any], token: TokenRecord) -> Answer:
        name, given = params.get("name"), params.get("arguments")
        given = {} if given is None else given
        if not isinstance(name, str) or not isinstance(given, dict):
            return _params_error("invalid_params", "prompts/get needs a text name and arguments")
        spec = prompts.PROMPTS_BY_NAME.get(name)
        if spec is None or not prompts.served(spec):
            listed = [p.name for p in prompts.PROMPTS if prompts.available(p, token.scopes)]
            return _params_error("unknown_prompt", "unknown prompt", {"prompts": listed})
        missing = self._missing(spec.needs, token)
        if missing:
            return Answer("insufficient_scope", missing=missing, name=f"prompt {name}")
        try:
            messages = prompts.render(spec, token.home, token.scopes, given)
        except prompts.PromptRefused as exc:
            return _params_error("invalid_params", str(exc))
        result = GetPromptResult(description=spec.description, messages=messages)
        return Answer(result=_dump(result))

    @staticmethod
    def _missing(tools: tuple[str, ...], token: TokenRecord) -> tuple[str, ...]:
        need: set[str] = set()
        for tool in tools:
            need |= resources.tool_scopes(tool) or set()
        return tuple(sorted(need - set(token.scopes)))

    async def _read(self, params: dict[str, Any], token: TokenRecord, ends: float) -> Answer:
        uri = params.get("uri")
        if not isinstance(uri, str):
            return _params_error("invalid_params", "resources/read needs a text uri")
        if uri == apps.VIEW_URI:  # static HTML: no box read, any token of the bridge
            return Answer(result=apps.read_result(), ttl_ms=apps.VIEW_TTL_MS)
        target = resources.resolve(uri, token.home)
        spec = None if target is None else TOOLS_BY_NAME.get(target.tool)
        if target is None or spec is None:
            data = {"uri": resources.echo(uri)}
            return Answer(
                "unknown_resource", error=(jsonrpc.INVALID_PARAMS, "Resource not found", data)
            )
        missing = self._missing((spec.name,), token)
        if missing:
            return Answer("insufficient_scope", missing=missing, name=f"resource {target.name}")
        try:
            args = spec.args.model_validate(target.args)
        except ValidationError as exc:
            words = invalid_arguments(spec.name, exc)["content"][0]["text"]
            return _params_error("invalid_arguments", words, {"uri": resources.echo(uri)})
        behind = None if spec.run is not None else self._behind(token)
        try:
            if behind is not None:
                return _box_error("roster_behind", uri, roster_behind_result(behind))
            out = await self._run(spec, args, token, ends)
        except Refusal as exc:
            sent = exc.code
            refused = refusal_result(exc)  # cleans the peer's code, as a tool call does
            return _box_error(exc.code if exc.code == sent else "other", uri, refused)
        text, note = (c["text"] for c in out["content"])  # ok_result: the JSON, the note
        contents: list[TextResourceContents | BlobResourceContents] = [
            TextResourceContents(uri=uri, mime_type=resources.JSON_MIME, text=text),
            TextResourceContents(uri=uri, mime_type="text/plain", text=note),
        ]
        return Answer(result=_dump(ReadResourceResult(contents=contents)), ttl_ms=target.ttl_ms)


def _box_error(outcome: str, uri: str, refused: dict[str, Any]) -> Answer:
    """A read the box (or the roster) refused: -32603, the tool's words, the refusal in data."""
    words = refused["content"][0]["text"]
    data = {"uri": resources.echo(uri), ERROR_META: refused["_meta"][ERROR_META]}
    return Answer(outcome, error=(INTERNAL_ERROR, words, data))
