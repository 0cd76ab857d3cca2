"""What each `/mcp` request leaves behind: one audit line (logger `ftwbridge.audit`) and one
metric sample, refusals included (docs/operations.md, "Logs"). A tool call's line starts `tool=`, any
other request's `method=`; `status` is `ok`, an outcome word of `OUTCOMES`, or a box's
registry code. Never a token, a key or a client's free text: values are `log_safe`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from ftwbridge.store import TokenRecord

from .results import KNOWN_OUTCOMES, log_safe

audit = logging.getLogger("ftwbridge.audit")

OUTCOMES = {
    "method_not_allowed": "405: not POST",
    "bad_media_type": "415: Content-Type is not application/json",
    "not_acceptable": "406: Accept does not allow application/json",
    "body_too_large": "413: the body is over max_body_bytes",
    "body_too_slow": "408: the body did not arrive within body_timeout_s",
    "unauthorized": "401: no token, or one that is unknown, expired or withdrawn",
    "rate_limited": "429: the agent's requests past http_burst / http_per_s",
    "protocol_error": "a JSON-RPC error from the envelope checks (versions, headers, JSON)",
    "method_not_found": "a JSON-RPC method the bridge does not serve",
    "invalid_params": "a request with parameters it cannot use (tools, resources, prompts)",
    "unknown_tool": "tools/call naming no tool of the bridge",
    "app_only": "tools/call of the home view's app-only tool from a client without MCP Apps",
    "insufficient_scope": "403: the token lacks a scope the tool (resource, prompt) needs",
    "invalid_arguments": "a tool's arguments (or a resource URI's) do not fit its schema",
    "roster_behind": "the box sent an older roster that does not list the agent",
    "origin_refused": "403: a foreign Origin (app.py)",
    "host_refused": "421: a Host the bridge does not serve (app.py)",
    "bad_framing": "400: Content-Length and Transfer-Encoding together (framing.py)",
    "bad_coding": "415: a Content-Encoding other than identity (framing.py)",
    "cancelled": "the client left before its body arrived, or the bridge stopped under the call",
    "late": "503: still under way call_deadline_s after its start (mcp/deadline.py)",
    "error": "a fault of the bridge's own (its traceback is logged by the HTTP server)",
    "notification": "202: a JSON-RPC notification",
    "forwarded": "sent whole to the instance holding the home, which answered (ftwbridge.mesh)",
    "guarded": "429: the entry's coarse guard per agent, before forwarding (ftwbridge.mesh)",
    "moved": "421 to a forwarding instance: this one no longer holds the home at that epoch",
    "unknown_resource": "resources/read of a URI that is not one of the token's home's resources",
    "unknown_prompt": "prompts/get naming no prompt of the bridge",
    "input_required": "a command waits for the person's confirmation (MCP 2026-07-28 MRTR)",
    "listen_refused": "subscriptions/listen refused before its stream opened (docs/live.md)",
}
"""The outcome words of `/mcp` requests other than `ok` and a box's registry codes (audit
`status`, metric label `outcome`), and when each is given."""
METHODS = frozenset(
    {
        "initialize",
        "ping",
        "server/discover",
        "tools/list",
        "tools/call",
        "notifications",
        "resources/list",
        "resources/templates/list",
        "resources/read",
        "prompts/list",
        "prompts/get",
        "subscriptions/listen",
    }
)
"""JSON-RPC methods named in the request metric; any other is counted as `other` (a client
chooses the method, so the label set stays bounded), and a request refused before its body
was read as `-`."""


@dataclass(slots=True)
class Seen:
    """What one request's audit line and metric sample say (filled in as it is handled)."""

    method: str = "-"
    outcome: str = "ok"
    token: TokenRecord | None = None
    tool: str | None = None
    delivered: bool = True
    """False when the client had left before the answer was sent: the call did finish
    (`outcome` says how), but nobody received the answer (audited `delivered=no`)."""


def method_label(method: str) -> str:
    if method.startswith("notifications/"):
        return "notifications"
    return method if method in METHODS else "other"


class Recorder:
    """Writes each request's audit line and tells the metrics.

    Args:
        on_call: told (tool, outcome, seconds) after each tool call, if given.
        on_request: told (method, outcome) after each request, if given.
    """

    def __init__(
        self,
        on_call: Callable[[str, str, float], None] | None,
        on_request: Callable[[str, str], None] | None,
    ) -> None:
        self._on_call = on_call
        self._on_request = on_request

    def record(
        self, seen: Seen, status: int, headers: dict[str, list[str]], seconds: float
    ) -> None:
        """One request's audit line (built only when `ftwbridge.audit` logs INFO) and metric
        sample (tool calls: also `on_call`)."""
        if audit.isEnabledFor(logging.INFO):
            _line(seen, status, headers, seconds)
        if seen.tool is not None and self._on_call is not None:
            known = seen.outcome in KNOWN_OUTCOMES or seen.outcome in OUTCOMES
            self._on_call(seen.tool, seen.outcome if known else "other", seconds)
        if self._on_request is not None:
            known = seen.outcome in KNOWN_OUTCOMES or seen.outcome in OUTCOMES
            self._on_request(seen.method, seen.outcome if known else "other")


def _line(seen: Seen, status: int, headers: dict[str, list[str]], seconds: float) -> None:
    """The audit line of one request (module docstring)."""
    t = seen.token
    client = (t.client if t is not None else "") or (headers.get("user-agent") or ["-"])[0]
    who = (
        log_safe(t.home) if t is not None else "-",
        log_safe(t.agent_id) if t is not None else "-",
        log_safe(client),
    )
    gone = "" if seen.delivered else " delivered=no"
    if seen.tool is not None:
        audit.info(
            "tool=%s home=%s agent=%s client=%s status=%s duration_ms=%d%s",
            seen.tool,
            *who,
            seen.outcome,
            seconds * 1000,
            gone,
        )
    else:
        audit.info(
            "method=%s home=%s agent=%s client=%s status=%s http=%d duration_ms=%d%s",
            seen.method,
            *who,
            seen.outcome,
            status,
            seconds * 1000,
            gone,
        )
