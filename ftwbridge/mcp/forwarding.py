"""`/mcp`'s side of forwarding between instances (docs/architecture.md, "When the home's
uplink is at another instance"): a request whose token's home another instance holds goes
there through the `MeshPort`, and a forwarded request for a home this instance no longer holds
is answered 421 with `MESH_MOVED`, so its sender looks again.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Protocol

from ftwbridge.proto.refusal import Refusal
from ftwbridge.store import TokenRecord

from . import inbound
from .audit import Seen
from .http import HttpRequest, HttpResponse
from .replies import result_response
from .results import refusal_result

MESH_MOVED = "ftw-mesh-moved"
"""The header of the 421 a holder answers a forwarding instance when it no longer holds the
home at the epoch named (docs/architecture.md, "When the home's uplink is at another
instance"); a client never sees it."""


class MeshPort(Protocol):
    """What `/mcp` needs of the mesh between instances (`ftwbridge.mesh`; docs/operations.md,
    "Many instances")."""

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


def is_listen(route: inbound.Route | inbound.Rejection) -> bool:
    """A 2026-07-28 `subscriptions/listen` (a stream: forwarded as one, docs/live.md)."""
    return (
        isinstance(route, inbound.Route)
        and route.era == "modern"
        and route.method == "subscriptions/listen"
    )


async def not_held(
    mesh: MeshPort | None, req: HttpRequest, token: TokenRecord, seen: Seen
) -> HttpResponse | None:
    """On a forwarded request (`mesh_epoch` set): the 421 `MESH_MOVED` when this instance does
    not hold the token's home at that epoch (audited `moved`); else None."""
    if req.mesh_epoch is not None and (
        mesh is None or not await mesh.holds(token.home, req.mesh_epoch)
    ):
        seen.outcome = "moved"
        return HttpResponse(421, {MESH_MOVED: "1"})
    return None


async def forward(
    mesh: MeshPort | None,
    req: HttpRequest,
    token: TokenRecord,
    route: inbound.Route | inbound.Rejection,
    body: bytes,
    seen: Seen,
) -> HttpResponse | None:
    """The answer of the instance holding the token's home when that is another one (a stream
    for `subscriptions/listen`; a failed holder's refusal as a tool call's result in words),
    with its outcome in `seen`; None to answer here (no mesh, a request forwarded to us
    already, or this instance holds the home)."""
    if req.mesh_epoch is not None or mesh is None:
        return None
    if is_listen(route):
        assert isinstance(route, inbound.Route)
        relayed = await mesh.forward_stream(token.home, req, body, route.id)
        if relayed is not None:
            seen.outcome = "forwarded"
        return relayed
    rid = None if isinstance(route, inbound.Rejection) else route.id
    who = replace(req, remote=f"agent {token.home} {token.agent_id}")  # the guard's key
    sent = await mesh.forward(token.home, who, body, rid)
    if isinstance(sent, HttpResponse):
        seen.outcome = sent.outcome or "forwarded"
        return sent
    if sent is not None and isinstance(route, inbound.Route) and route.method == "tools/call":
        seen.outcome = sent.code
        return result_response(route, refusal_result(sent))
    return None
