"""MCP Apps (`io.modelcontextprotocol/ui`, SEP-1865): the home view `ui://ftwbridge/home`
(docs/apps.md).

Negotiation (SEP-1865 "Client<>Server Capability Negotiation"): the bridge declares the
extension in `server/discover` and `initialize` (`CAPABILITIES_EXTENSIONS`); a request whose
`params._meta` client capabilities list `text/html;profile=mcp-app` under the extension's
`mimeTypes` (`wants_view`) gets the view: `tools/list` puts `_meta.ui.resourceUri` on the
tools of `WITH_VIEW` and lists the app-only tool `LIVE_TOOL` (`visibility: ["app"]`);
`resources/list` lists the view. Any other request sees the tools and resources exactly as
without the extension. The 2025 eras carry no client capabilities per request and the bridge
keeps no session, so a 2025 client sees no view (docs/apps.md, "Which hosts").

`LIVE_TOOL` is what the view calls while it is shown: read-only, scope `ftw.live.read`,
answered by `live_for_view` (the `status` read, at most one per (home, agent) per
`LIVE_CACHE_S`). A client that did not negotiate the view (the model of a host without Apps,
or a script) is refused in words (SEP-1865 "Visibility": an app-only tool is not the model's).
"""

from __future__ import annotations

import json
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import cache
from importlib import resources as package_files
from typing import Any, Final

import trio
from mcp_types import Resource
from pydantic import ValidationError

from ftwbridge.proto.refusal import Refusal
from ftwbridge.store import TokenRecord

from .inbound import META_CAPABILITIES
from .results import invalid_arguments, refusal_result, roster_behind_result, text_error
from .tools import REASON_WORDS, TOOLS_BY_NAME, ToolSpec

EXTENSION_ID: Final = "io.modelcontextprotocol/ui"
"""The extension's identifier (SEP-1865 "Extension Identifier")."""
APP_MIME: Final = "text/html;profile=mcp-app"
"""The view's mime type (SEP-1865 "UI Resource Format")."""
VIEW_URI: Final = "ui://ftwbridge/home"
LIVE_TOOL: Final = "home_view_live"
WITH_VIEW: Final = ("status", "plan_get", "energy_report")
"""The tools whose results the view renders (a name the tool table lacks is skipped)."""
CAPABILITIES_EXTENSIONS: Final[dict[str, dict[str, Any]]] = {EXTENSION_ID: {}}
"""What the bridge declares under `capabilities.extensions` (SEP-1724 extension settings)."""
LIVE_CACHE_S: Final = 5.0
"""How long one `status` read answers every `LIVE_TOOL` call of one (home, agent), in s."""
VIEW_TTL_MS: Final = 3_600_000
"""How long a client may keep a read of the view (it changes only with the bridge's version)."""
UI_META: Final = {
    "csp": {"connectDomains": [], "resourceDomains": [], "frameDomains": [], "baseUriDomains": []},
    "prefersBorder": True,
}
"""The view's `_meta.ui` (SEP-1865 `UIResourceMeta`): no origin of its own for anything (no
fetch, script, style, font, image or frame from anywhere), so a host's CSP is its strictest
default; everything it shows arrives through the host."""
_REASONS_MARK: Final = "/*REASONS*/{}"


def wants_view(params: dict[str, Any]) -> bool:
    """Whether a request's client capabilities (`params._meta`, MCP 2026-07-28 per request)
    declare the extension with `text/html;profile=mcp-app` among its `mimeTypes`."""
    meta = params.get("_meta")
    caps = meta.get(META_CAPABILITIES) if isinstance(meta, dict) else None
    ext = caps.get("extensions") if isinstance(caps, dict) else None
    settings = ext.get(EXTENSION_ID) if isinstance(ext, dict) else None
    mimes = settings.get("mimeTypes") if isinstance(settings, dict) else None
    return isinstance(mimes, list) and APP_MIME in mimes


def live_definition() -> dict[str, Any]:
    """`LIVE_TOOL` as `tools/list` shows it to a client that negotiated the view."""
    status = TOOLS_BY_NAME["status"].definition()
    return {
        "name": LIVE_TOOL,
        "title": "Home view: live status",
        "description": "For the home view only (MCP Apps, app-only): the status read, shared"
        f" by every call of this assistant for {LIVE_CACHE_S:g} s. Call status instead.",
        "inputSchema": status["inputSchema"],
        "outputSchema": status["outputSchema"],
        "annotations": status["annotations"] | {"title": "Home view: live status"},
        "_meta": {"ui": {"resourceUri": VIEW_URI, "visibility": ["app"]}},
    }


def tool_list(base: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`base` (the tools as every client sees them) for a client that negotiated the view:
    the tools of `WITH_VIEW` carry `_meta.ui.resourceUri`, and `LIVE_TOOL` comes last."""
    out = [
        t | {"_meta": {"ui": {"resourceUri": VIEW_URI}}} if t["name"] in WITH_VIEW else t
        for t in base
    ]
    return [*out, live_definition()]


def refuse_app_only() -> dict[str, Any]:
    """The tool result refusing `LIVE_TOOL` to a client that did not negotiate the view."""
    return text_error(
        f'{LIVE_TOOL} is an app-only tool (MCP Apps, visibility ["app"]): only the home view'
        " calls it, through a host that declared io.modelcontextprotocol/ui with"
        f" {APP_MIME}. Call status for the same data."
    )


@cache
def view_html() -> str:
    """The view: one HTML file with its script, style and SVG inline (package data), the
    plan's reason words filled in from `tools.REASON_WORDS`."""
    raw = package_files.files("ftwbridge.mcp").joinpath("view/home.html").read_text("utf-8")
    assert _REASONS_MARK in raw
    words = json.dumps(REASON_WORDS, ensure_ascii=False, separators=(",", ":"))
    return raw.replace(_REASONS_MARK, words.replace("</", "<\\/"))


def listing() -> Resource:
    """The view's entry in `resources/list` (for a client that negotiated the view)."""
    return Resource(
        uri=VIEW_URI,
        name="home",
        title="Home view",
        description="A live view of the home: power flows, battery, chargers, sources, and"
        " the next 12 hours of prices and plan. Rendered by hosts with MCP Apps.",
        mime_type=APP_MIME,
        _meta={"ui": UI_META},
    )


def read_result() -> dict[str, Any]:
    """The `resources/read` result of `VIEW_URI` (the era's fields are added by the service)."""
    content = {"uri": VIEW_URI, "mimeType": APP_MIME, "text": view_html(), "_meta": {"ui": UI_META}}
    return {"contents": [content]}


def demo_lines() -> list[str]:
    """How to see the view, for the demo's output (docs/apps.md)."""
    size = len(view_html().encode())
    return [
        f"The home view (MCP Apps, {VIEW_URI}, {size:,} bytes) comes with status and plan_get",
        "  to a 2026-07-28 client that declares io.modelcontextprotocol/ui with",
        f"  {APP_MIME}: hosts that render MCP Apps (ChatGPT, Claude on the web",
        "  and desktop, VS Code, Cursor, Goose) show it in the conversation; 2025 clients see",
        "  today's tools. The test host page is peers/apps_host/ (ext-apps' AppBridge): make",
        "  test runs it in Chromium against a stub home, and FTW_APPS_SHOTS=DIR .venv/bin/pytest",
        "  tests/browser/test_apps_view.py keeps its screenshots in DIR (docs/apps.md).",
    ]


ReadStatus = Callable[[TokenRecord], Awaitable[dict[str, Any]]]
"""The service's `status` tool path for a token: its result (`ok_result`); raises `Refusal`."""


@dataclass(slots=True)
class _Entry:
    at: float = -1e18
    result: dict[str, Any] | None = None
    lock: trio.Lock = field(default_factory=trio.Lock)


class ViewCache:
    """The last `status` result per (home, agent key), kept `ttl_s` seconds (trio's clock),
    at most `max_entries` of them (the oldest dropped first)."""

    def __init__(self, ttl_s: float = LIVE_CACHE_S, max_entries: int = 4096) -> None:
        self.ttl_s = ttl_s
        self._max = max_entries
        self._entries: dict[tuple[str, bytes], _Entry] = {}
        self.reads = 0
        """How many reads the cache let through (for tests and the docs' figures)."""

    async def get(
        self, key: tuple[str, bytes], read: Callable[[], Awaitable[dict[str, Any]]]
    ) -> dict[str, Any]:
        """The result cached for `key` while fresh, else `read()`'s (callers of one key that
        arrive during a read wait for it and share it). A refusal is raised, never kept."""
        entry = self._entries.get(key)
        if entry is None:
            while len(self._entries) >= self._max:
                del self._entries[next(iter(self._entries))]
            entry = self._entries[key] = _Entry()
        async with entry.lock:
            if entry.result is not None and trio.current_time() - entry.at < self.ttl_s:
                return entry.result
            self.reads += 1
            result = await read()
            entry.at, entry.result = trio.current_time(), result
            return result


async def live_for_view(
    cache: ViewCache, token: TokenRecord, read_status: ReadStatus
) -> dict[str, Any]:
    """The `live` answer `LIVE_TOOL` gives the view of `token`'s (home, agent): today the
    `status` tool's own box read (`read_status`, paced and bounded like any read), at most one
    per `cache.ttl_s` per (home, agent); raises `Refusal` as the read does."""
    return await cache.get((token.home, token.agent_key), lambda: read_status(token))


@dataclass(frozen=True, slots=True)
class LiveAnswer:
    """What `LIVE_TOOL` answers: a tool `result`, or the scopes `missing` (403 for step-up);
    `outcome` is the audit word (`audit.OUTCOMES`, or a box's code)."""

    outcome: str
    result: dict[str, Any] = field(default_factory=dict)
    missing: tuple[str, ...] = ()


RunTool = Callable[[ToolSpec, Any, TokenRecord, float], Awaitable[dict[str, Any]]]
"""The service's tool path: (tool, parsed arguments, token, when the call's work ends in trio
time) -> its result; raises `Refusal`."""


async def answer_live(
    params: dict[str, Any],
    token: TokenRecord,
    arguments: dict[str, Any],
    cache: ViewCache,
    run: RunTool,
    behind: Callable[[TokenRecord], Any],
    ends: float = math.inf,
) -> LiveAnswer:
    """One `tools/call` of `LIVE_TOOL`, in order: refused in words (`app_only`) to a request
    that did not negotiate the view; the `status` tool's scopes; its (empty) arguments; the
    roster behind (`behind(token)` not None); then `live_for_view`, a box refusal in words."""
    status = TOOLS_BY_NAME["status"]
    if not wants_view(params):
        return LiveAnswer("app_only", refuse_app_only())
    missing = tuple(s.value for s in status.scopes if s.value not in token.scopes)
    if missing:
        return LiveAnswer("insufficient_scope", missing=missing)
    try:
        args = status.args.model_validate(arguments)
    except ValidationError as exc:
        return LiveAnswer("invalid_arguments", invalid_arguments(LIVE_TOOL, exc))
    late = behind(token)
    if late is not None:
        return LiveAnswer("roster_behind", roster_behind_result(late))
    try:
        return LiveAnswer(
            "ok", await live_for_view(cache, token, lambda t: run(status, args, t, ends))
        )
    except Refusal as exc:
        sent = exc.code
        refused = refusal_result(exc)  # cleans the peer's code, as a tool call does
        return LiveAnswer(exc.code if exc.code == sent else "other", refused)
