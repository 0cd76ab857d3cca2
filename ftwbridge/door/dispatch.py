"""What the door does with each message an authenticated box sends (PROTOCOL.md part C).

`dispatch(door, uplink, env, raw)` routes one decoded door message: `tun` to its tunnel (within
the home's limits toward the bridge; over them it is dropped and counted, the uplink stays up),
`tun.end` to end one, `claim.offer`, `agent.denied`, and `roster`, which is answered
`roster.ok` or `roster.refused`. A message of another type, or a body of the wrong shape, is
ignored (part C: unknown types are skipped).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import trio

from ftwbridge.proto.door import tun_fields
from ftwbridge.proto.envelope import Envelope
from ftwbridge.proto.errors import RemoteProtocolError
from ftwbridge.proto.registry import Msg, peer_reason
from ftwbridge.proto.roster import RosterProblem

from .tunnel import Uplink

if TYPE_CHECKING:
    from .door import Door

CLAIM_MAX_MS = 600_000
"""A claim offer lasts at most 10 minutes, whatever the box says (PROTOCOL.md part C)."""

Handler = Callable[["Door", Uplink, Any, "str | bytes"], Awaitable[None]]


async def dispatch(door: Door, uplink: Uplink, env: Envelope, raw: str | bytes) -> None:
    """Handle one message of `uplink`'s box (`raw` is its bytes, for the limits)."""
    handler = HANDLERS.get(env.t)
    if handler is not None:
        await handler(door, uplink, env.b, raw)


async def _tun(door: Door, uplink: Uplink, body: Any, raw: str | bytes) -> None:
    try:
        sid, d = tun_fields(body)
    except RemoteProtocolError:
        return
    if not door.limits(uplink.home, outbound=False).allow(trio.current_time(), len(raw)):
        door.stats.dropped_from_box += 1
        return
    t = uplink.tuns.get(sid)
    if t is not None and t.sink is not None:
        await t.sink(d)  # the warm path: the session's handler, in this task
    elif t is not None and not t._deliver(d):
        door.stats.dropped_from_box += 1


async def _tun_end(door: Door, uplink: Uplink, body: Any, raw: str | bytes) -> None:
    b = body if isinstance(body, dict) else {}
    end_sid = b.get("sid")
    t = uplink.tuns.pop(end_sid, None) if isinstance(end_sid, int) else None
    if t is not None:
        t._end(peer_reason(b.get("reason")))


async def _claim_offer(door: Door, uplink: Uplink, body: Any, raw: str | bytes) -> None:
    b = body if isinstance(body, dict) else {}
    digest, expires = b.get("codeHash"), b.get("expiresAtMs")
    if not (isinstance(digest, bytes) and len(digest) == 32 and isinstance(expires, int)):
        return
    now = door.wall_ms()
    expires = min(expires, now + CLAIM_MAX_MS)
    if door.events.claim_offered is not None:
        await door.events.claim_offered(uplink.home, digest, expires)
        return
    for old in [d for d, (h, e) in door.claims.items() if h == uplink.home or e <= now]:
        del door.claims[old]  # one open offer per home; expired ones go
    door.claims[digest] = (uplink.home, expires)


async def _agent_denied(door: Door, uplink: Uplink, body: Any, raw: str | bytes) -> None:
    b = body if isinstance(body, dict) else {}
    if isinstance(b.get("req"), str) and door.events.agent_denied is not None:
        await door.events.agent_denied(uplink.home, b["req"])


async def _roster(door: Door, uplink: Uplink, body: Any, raw: str | bytes) -> None:
    b = body if isinstance(body, dict) else {}
    signed = b.get("roster")
    if isinstance(signed, bytes):
        ok, seq, code = await door.rosters.take_roster(uplink.home, signed)
    else:
        held = await door.rosters.roster(uplink.home)
        door.rosters.count_refused(RosterProblem.MALFORMED.value)
        ok, seq, code = False, held.seq if held else 0, RosterProblem.MALFORMED.value
    reply = (
        Envelope(Msg.ROSTER_OK, None, {"seq": seq})
        if ok
        else Envelope(Msg.ROSTER_REFUSED, None, {"seq": seq, "code": code})
    )
    await uplink.send_raw(reply.encode())


HANDLERS: dict[str, Handler] = {
    Msg.TUN: _tun,
    Msg.TUN_END: _tun_end,
    Msg.CLAIM_OFFER: _claim_offer,
    Msg.AGENT_DENIED: _agent_denied,
    Msg.ROSTER: _roster,
}
"""The door message types a box may send once authenticated, and their handlers."""
