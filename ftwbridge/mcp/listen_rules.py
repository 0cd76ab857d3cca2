"""`subscriptions/listen` without I/O (MCP 2026-07-28, SEP-2575; docs/live.md).

`honored(params, home, scopes)` checks a listen request's filter and returns the subset this
bridge serves, or a `Rejection` (an ordinary JSON error before the acknowledgement).
`UpdatePacer` decides when a stream sends `notifications/resources/updated`: readings that
moved wait until `min_interval_s` after the last one; a notable change (a source's state, the
mode, a dispatch block) goes at once. `ack`, `updated`, `graceful_end` and `KEEP_ALIVE` are the
stream's bytes as the official SDKs write and read them: each JSON-RPC message is one
`event: message` whose `data` is the message, each stamped with the listen request's id under
`_meta["io.modelcontextprotocol/subscriptionId"]` (its JSON type kept: a text id stays text).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import quote

from mcp_types import jsonrpc

from ftwbridge.proto.names import Scope

from .inbound import Rejection

SUBSCRIPTION_ID: Final = "io.modelcontextprotocol/subscriptionId"
"""The `_meta` key that names the stream a notification belongs to (SEP-2575)."""
ACKNOWLEDGED: Final = "notifications/subscriptions/acknowledged"
UPDATED: Final = "notifications/resources/updated"
MAX_URIS: Final = 16
"""The most URIs one filter may name (PROTOCOL.md, bridge limits)."""
KEEP_ALIVE: Final = b": keep-alive\n\n"
"""An SSE comment (WHATWG HTML, "Server-sent events"): readers skip it; proxies see bytes."""
FILTER_KEYS: Final = ("toolsListChanged", "promptsListChanged", "resourcesListChanged")


def live_uri(home: str) -> str:
    """`ftw://home/{home}/live`, the home id percent-encoded (RFC 3986 section 2.1)."""
    return f"ftw://home/{quote(home, safe='')}/live"


def honored(
    params: dict[str, Any], rid: str | int, *, home: str, scopes: tuple[str, ...]
) -> dict[str, Any] | Rejection:
    """The subset of `params.notifications` this bridge delivers, for the acknowledgement.

    Only `resourceSubscriptions` naming the token's own `live` URI is honoured, and only with
    `ftw.live.read`; anything else the filter asks (other URIs, list-changed kinds: this
    bridge's lists do not change while it runs) is left out, as the spec asks ("unsupported
    types are omitted"). Raises nothing.

    Returns:
        the honoured filter (`{}` or `{"resourceSubscriptions": [uri]}`), or a -32602
        `Rejection` for a filter that is not an object, URIs that are not a list of text, or
        more than `MAX_URIS` of them.
    """
    wanted = params.get("notifications")
    if not isinstance(wanted, dict):
        return _invalid(rid, "subscriptions/listen needs params.notifications, an object")
    uris = wanted.get("resourceSubscriptions", [])
    if uris is None:
        uris = []
    if not isinstance(uris, list) or not all(isinstance(u, str) for u in uris):
        return _invalid(rid, "resourceSubscriptions must be a list of resource URIs (text)")
    if len(uris) > MAX_URIS:
        return _invalid(rid, f"a filter names at most {MAX_URIS} URIs (it named {len(uris)})")
    for key in FILTER_KEYS:
        if key in wanted and not isinstance(wanted[key], bool | None):
            return _invalid(rid, f"{key} must be true or false")
    mine = live_uri(home)
    if mine in uris and Scope.FTW_LIVE_READ.value in scopes:
        return {"resourceSubscriptions": [mine]}
    return {}


def _invalid(rid: str | int, words: str) -> Rejection:
    return Rejection(400, jsonrpc.INVALID_PARAMS, f"Invalid params: {words}", rid)


def _event(message: dict[str, Any]) -> bytes:
    data = json.dumps(message, ensure_ascii=False, separators=(",", ":"))
    return f"event: message\ndata: {data}\n\n".encode("utf-8", "backslashreplace")


def ack(rid: str | int, filt: dict[str, Any]) -> bytes:
    """The stream's first event: `notifications/subscriptions/acknowledged` with the subset."""
    params = {"notifications": filt, "_meta": {SUBSCRIPTION_ID: rid}}
    return _event({"jsonrpc": "2.0", "method": ACKNOWLEDGED, "params": params})


def updated(rid: str | int, uri: str) -> bytes:
    """`notifications/resources/updated` for `uri` on stream `rid`."""
    params = {"uri": uri, "_meta": {SUBSCRIPTION_ID: rid}}
    return _event({"jsonrpc": "2.0", "method": UPDATED, "params": params})


def graceful_end(rid: str | int) -> bytes:
    """The listen request's result: the server ended the stream on purpose (a drain)."""
    result = {"_meta": {SUBSCRIPTION_ID: rid}, "resultType": "complete"}
    return _event({"jsonrpc": "2.0", "id": rid, "result": result})


@dataclass(slots=True)
class UpdatePacer:
    """When one stream's next `resources/updated` is due (times in seconds, any one clock).

    `changed(now, notable)` notes a change; `due_at()` is when to send (None: nothing to
    send); `sent(now)` after sending. Readings wait until `min_interval_s` after the last
    sent update; a notable change is due at once.
    """

    min_interval_s: float
    last_sent: float = -math.inf
    pending: bool = False
    notable: bool = False

    def changed(self, now: float, *, notable: bool) -> None:
        """Something moved at `now` (`notable`: a source's state, the mode, a dispatch block)."""
        self.pending = True
        self.notable = self.notable or notable

    def due_at(self) -> float | None:
        """When the next update is due, or None when nothing waits."""
        if not self.pending:
            return None
        if self.notable:
            return -math.inf
        return self.last_sent + self.min_interval_s

    def sent(self, now: float) -> None:
        """An update went out at `now`."""
        self.last_sent = now
        self.pending = False
        self.notable = False
