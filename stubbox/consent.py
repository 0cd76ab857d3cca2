"""The grant an owner gives when approving an assistant at home (PROTOCOL.md parts B, C, E).

`grant_for(request, ...)` turns the door's `agent.request {req, client, name, redirectHost,
scopes, ops, caps, key, expiresAtMs}` into the roster row's `AgentGrant`: the scopes asked
(narrowed when the owner says which), the ops asked that an agent may hold at all (agents.yaml
`agent_ops`) and whose scope is granted (registry.yaml `ops`), and the caps asked, each at most
its ceiling (agents.yaml `caps`; unknown caps are dropped: the owner grants only what is
explained to them). Approved for reads only, the row keeps the read scopes and no `ops`.
"""

from __future__ import annotations

from typing import Any, Final

from ftwbridge.proto.names import AgentOp
from ftwbridge.proto.registry import CAPS, OP_SCOPE, READ_SCOPES
from ftwbridge.proto.roster import AgentGrant

GRANT_TTL_MS: Final = 90 * 86_400_000
"""How long an approved assistant's grant lasts unless the owner says otherwise (90 days)."""


def _texts(value: Any) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def grant_for(
    request: dict[str, Any],
    *,
    now_ms: int,
    scopes: list[str] | None = None,
    reads_only: bool = False,
    expires_at_ms: int | None = None,
) -> AgentGrant:
    """The grant for `request` (an `agent.request` body) approved at wall-clock `now_ms` (ms
    since the epoch); `scopes` narrows the scopes asked, `reads_only` keeps only read scopes
    and no ops, `expires_at_ms` ends it (default: 90 days on)."""
    asked = _texts(request.get("scopes"))
    granted = asked if scopes is None else [s for s in asked if s in scopes]
    if reads_only:
        granted = [s for s in granted if s in READ_SCOPES]
    ops = [
        op
        for op in _texts(request.get("ops"))
        if op in set(AgentOp) and OP_SCOPE[op] in granted and not reads_only
    ]
    asked_caps = request.get("caps")
    caps = {
        name: min(value, CAPS[name].ceiling)
        for name, value in (asked_caps if isinstance(asked_caps, dict) else {}).items()
        if name in set(CAPS)
        and isinstance(value, int)
        and not isinstance(value, bool)
        and value >= 1
    }
    req = str(request.get("req", ""))
    return AgentGrant(
        id=f"agent-{req[:8]}",
        client=str(request.get("client", ""))[:100],
        name=str(request.get("name", ""))[:100],
        scopes=tuple(dict.fromkeys(granted)),
        ops=tuple(dict.fromkeys(ops)),
        caps=caps,
        granted_at_ms=now_ms,
        expires_at_ms=expires_at_ms or now_ms + GRANT_TTL_MS,
    )
