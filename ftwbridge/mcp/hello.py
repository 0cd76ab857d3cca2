"""The answers that describe the server rather than the home: `server/discover` (2026-07-28),
`initialize` and `ping` (the legacy era), and `tools/list` (one page holds every tool;
MCP Apps' view tools where the client negotiated them, `mcp/apps.py`)."""

from __future__ import annotations

from typing import Any

from mcp_types import jsonrpc

from . import apps, inbound
from .audit import Seen
from .capabilities import capabilities
from .http import HttpResponse
from .identity import SERVER_INFO
from .replies import error_response, result_response

INSTRUCTIONS = (
    "Access to one home's energy box: live power, plan, prices, history, health; within the"
    " owner's grant, start and stop a charge, and ask the owner for lasting changes."
)


def hello(route: inbound.Route, *, listen: bool) -> HttpResponse | None:
    """The answer to `server/discover`, `initialize` or `ping` in `route`'s era (`listen`:
    whether `subscriptions/listen` is served), or None for any other method."""
    m = route.method
    if route.era == "modern" and m == "server/discover":
        result = {
            "supportedVersions": list(inbound.MODERN),
            "capabilities": capabilities("modern", listen=listen),
            "instructions": INSTRUCTIONS,
            "_meta": {"io.modelcontextprotocol/serverInfo": SERVER_INFO},
        }
        return result_response(route, result, cacheable=True)
    if route.era == "legacy" and m == "initialize":
        asked = route.params.get("protocolVersion")
        version = asked if asked in inbound.LEGACY else inbound.LEGACY[-1]
        result = {
            "protocolVersion": version,
            "capabilities": capabilities("legacy", listen=listen),
            "serverInfo": SERVER_INFO,
            "instructions": INSTRUCTIONS,
        }
        return result_response(route, result)
    if route.era == "legacy" and m == "ping":
        return result_response(route, {})
    return None


def tools_list(route: inbound.Route, tools: list[dict[str, Any]], seen: Seen) -> HttpResponse:
    """`tools/list`: every tool in one page (a cursor was never issued, so any is refused as
    invalid params), with the home view's tools where the client negotiated MCP Apps."""
    if route.params.get("cursor") is not None:
        seen.outcome = "invalid_params"
        return error_response(
            route, jsonrpc.INVALID_PARAMS, "Invalid params: unknown cursor", {"cursor": "unknown"}
        )
    listed = apps.tool_list(tools) if apps.wants_view(route.params) else tools
    return result_response(route, {"tools": listed}, cacheable=True)
