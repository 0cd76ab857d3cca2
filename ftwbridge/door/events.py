"""What the door tells the rest of the bridge: one typed port, `DoorEvents`, handed to `Door`
when it is built, so that reading the place that builds the door (`ftwbridge.run.Bridge`)
tells who listens to what (docs/architecture.md, "Who owns what").

Every listener is optional; a door without one of them does what the field says it does
alone. Listeners awaited in an uplink's reader hold that uplink's traffic while they run, so
they bound their own writes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from ftwbridge.proto.roster import Roster

RosterTaken = Callable[[str, Roster], Awaitable[None]]
"""(home, newest roster): awaited in the uplink's reader; it must do no I/O."""
RosterPersisted = Callable[[str, Roster, frozenset[bytes]], Awaitable[None]]
"""(home, newest roster, agent keys dropped by the rosters since the last save)."""
AgentDenied = Callable[[str, str], Awaitable[None]]
"""(home, consent request id)."""
ClaimOffered = Callable[[str, bytes, int], Awaitable[None]]
"""(home, SHA-256 of the claim code, expiresAtMs)."""
UplinkChange = Callable[[str], Awaitable[None]]
"""(home)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DoorEvents:
    """The door's listeners, one per event (PROTOCOL.md part C names the messages).

    Attributes:
        roster_taken: a newer roster was accepted and is held in memory (in the uplink's
            reader, no I/O: the pool closes dropped agents' sessions at once).
        roster_persisted: the store has the roster (in the roster applier, in order per home):
            the slow effects, with the agents dropped since the last save.
        agent_denied: a box answered `agent.denied {req}` (in the uplink's reader).
        claim_offered: a box sent `claim.offer`; when set (many instances), the offer goes
            to the listener (the shared store) instead of the door's own `claims`.
        fault: told `door` each time an uplink is closed 4400 for a message that breaks part C.
        uplink_up: a home's uplink has authenticated and is the home's (the cluster
            directory's claim).
        uplink_down: a home's uplink ended while it was still the home's (the directory's
            release); awaited shielded, at most `door.HOOK_DOWN_S`.
    """

    roster_taken: RosterTaken | None = None
    roster_persisted: RosterPersisted | None = None
    agent_denied: AgentDenied | None = None
    claim_offered: ClaimOffered | None = None
    fault: Callable[[str], None] | None = None
    uplink_up: UplinkChange | None = None
    uplink_down: UplinkChange | None = None
