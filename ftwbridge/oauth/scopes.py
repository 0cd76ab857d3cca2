"""Which scopes an assistant may ask for at `/authorize`, and the ops they stand for."""

from __future__ import annotations

from ftwbridge.proto.names import AgentOp, Scope
from ftwbridge.proto.registry import CONTROL_SCOPES, OP_SCOPE, READ_SCOPES

from .model import OAuthError


def grantable_scopes() -> frozenset[str]:
    """The scopes an assistant may ask for: the reads, and control's (PROTOCOL.md part E): the
    scopes of the ops agents may command (agents.yaml `agent_ops`, registry.yaml `ops`) and
    those agents.yaml adds (`ftw.goals.write`)."""
    control = {OP_SCOPE[op.value] for op in AgentOp} | set(CONTROL_SCOPES)
    return frozenset(s.value for s in (*READ_SCOPES, *control))


def ops_for(scopes: tuple[str, ...]) -> list[str]:
    """The ops an `agent.request` asks for: each agent op whose scope is among `scopes`
    (PROTOCOL.md part C, consent; part E)."""
    return [op.value for op in AgentOp if OP_SCOPE[op.value].value in scopes]


def granted_scopes(scope: str) -> list[str]:
    """The scopes a consent request asks for, from `/authorize`'s `scope` (space-separated).

    Tokens that name no scope of this bridge (`offline_access`, `openid`, a client's own word)
    are ignored, as RFC 6749 section 3.3 lets the server do; the person sees on the consent page
    what is asked. When nothing known remains, every read scope is asked (the default).

    Raises:
        OAuthError: `invalid_scope` for a scope of the registry that an assistant may not be
            granted here (not in `grantable_scopes`; PROTOCOL.md, registry `scopes`).
    """
    known = {s.value for s in Scope}
    asked = [s for s in scope.split() if s in known]
    if not set(asked) <= grantable_scopes():
        raise OAuthError("invalid_scope", "scopes must be among scopes_supported")
    return sorted(set(asked)) or sorted(s.value for s in READ_SCOPES)
