"""Uplinks and tunnels at the door (PROTOCOL.md part C).

One `Door` per bridge process. `serve_uplink(ws)` runs one box's uplink from challenge to
close: it authenticates the box with its home key, hands its rosters to the door's `Rosters`
(`rosters.py`, which keeps the home keys and rosters), routes `tun` messages to their `Tun` by
`sid`, and applies the per-home limits each way (a `tun` over a limit is dropped and
counted; the uplink stays up). The pool opens tunnels with `open_tun(home)`. A newer
authenticated uplink for the same home takes over: the older one is closed with 4409 and its
tunnels end `superseded`. What a box sends once authenticated is handled in `dispatch.py`.
Uplinks come from the door's own listener (`listener.py`, `door_bind`), the only one that
serves `/v1/box`; it pings every `door_ping_s` (15 s) and closes one silent for
`door_silence_s` (45 s).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import InitVar, dataclass, field
from typing import Any

import trio

from ftwbridge.config import Config
from ftwbridge.fairshare import SlotRefused, Slots
from ftwbridge.proto.door import (
    CLOSE_BAD_MESSAGE,
    CLOSE_BAD_SIGNATURE,
    CLOSE_SUPERSEDED,
    CLOSE_UNKNOWN_HOME,
    NONCE_BYTES,
    decode_door_message,
    verify_door_signature,
)
from ftwbridge.proto.envelope import Envelope
from ftwbridge.proto.errors import RemoteProtocolError
from ftwbridge.proto.names import TunEndReason
from ftwbridge.proto.pacing import TokenBucket
from ftwbridge.proto.registry import Msg
from ftwbridge.proto.roster import AgentGrant, Roster
from ftwbridge.store import Store

from .dispatch import dispatch
from .events import DoorEvents
from .refusals import RefusalLog, RosterBehind, peer_text
from .rosters import Rosters
from .stats import DoorStats
from .tunnel import WS_GONE, HomeOffline, Limits, LocalEnd, Tun, Uplink, WebSocketLike, close_ws

log = logging.getLogger("ftwbridge.door")
DOOR_STRANGERS = 1024
"""Uplinks authenticating at once (each has `door_hello_s`), all addresses together; past it
the address holding the most loses its oldest (`fairshare.FairShare`)."""
DOOR_STRANGERS_PER_SOURCE = 64
"""Uplinks one address may have authenticating at once (many homes behind one NAT dial
together after an outage: they authenticate in one round trip, so 64 at once is plenty)."""
CLOSE_TRY_LATER = 1013
"""RFC 6455 section 7.4.1: the server is overloaded; the box dials again later."""


HOOK_DOWN_S = 2.0
"""The longest an ended uplink waits for `events.uplink_down` (the directory's release), seconds."""


@dataclass(slots=True)
class Door:
    """The bridge's door: uplinks by home, their tunnels, limits, and (through `rosters`)
    the homes' keys and rosters.

    Args:
        config: limits and timeouts (`door_*` settings).
        store: home keys and newest rosters; held by `rosters`.
        events: who listens to the door (`events.DoorEvents`): rosters taken and persisted,
            agents denied, claims offered, faults, uplinks up and down.
        wall_ms: the bridge's wall clock in ms since the epoch (injected for tests).

    The roster methods here (`roster`, `wait_roster`, `apply_rosters`, ...) hand over to
    `rosters`; the uplink's reader calls `rosters` itself.
    """

    config: Config
    store: InitVar[Store]
    events: DoorEvents = field(default_factory=DoorEvents)
    wall_ms: Callable[[], int] = field(default=lambda: 0)
    stats: DoorStats = field(default_factory=DoorStats)
    _uplinks: dict[str, Uplink] = field(default_factory=dict)
    _buckets: dict[tuple[str, bool], Limits] = field(default_factory=dict)
    strangers: Slots = field(
        default_factory=lambda: Slots(DOOR_STRANGERS, DOOR_STRANGERS_PER_SOURCE)
    )
    """Uplinks that have not authenticated yet, per box address and in total (docs/operations.md,
    "Limits that strangers cannot fill")."""
    claims: dict[bytes, tuple[str, int]] = field(default_factory=dict)
    """Open home-claim offers: code hash -> (home, expiresAtMs), from `claim.offer` (one
    process; with `events.claim_offered` they go to the store instead)."""
    _refusal_log: RefusalLog = field(default_factory=RefusalLog)
    rosters: Rosters = field(init=False)
    """The homes' keys and rosters (`rosters.py`), sharing `stats` and the refusal log."""

    def __post_init__(self, store: Store) -> None:
        self.rosters = Rosters(
            store, stats=self.stats, events=self.events, refusal_log=self._refusal_log
        )

    # -- rosters and home keys: handed over to `self.rosters` (rosters.py) --

    async def apply_rosters(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """`Rosters.apply_rosters`: the roster applier, until cancelled."""
        await self.rosters.apply_rosters(task_status=task_status)

    @property
    def rosters_unsaved(self) -> int:
        """`Rosters.rosters_unsaved`: homes whose newest roster is not stored yet."""
        return self.rosters.rosters_unsaved

    async def rosters_saved(self) -> None:
        """`Rosters.rosters_saved`: wait until nothing is left to store (caller bounds time)."""
        await self.rosters.rosters_saved()

    async def roster(self, home: str) -> Roster | None:
        """`Rosters.roster`: `home`'s newest verified roster (memory, else store), or None."""
        return await self.rosters.roster(home)

    async def grant(self, home: str, agent_key: bytes) -> AgentGrant | None:
        """`Rosters.grant`: the agent's row in `home`'s newest roster, a copy held for a home
        whose uplink is elsewhere checked once more against the store."""
        return await self.rosters.grant(home, agent_key, here=self._uplinks)

    def forget_roster(self, home: str | None = None) -> None:
        """Drop the roster held in memory for `home` (None: for every home) unless its uplink
        is here: another instance took a newer one from the box, and the next look reads it
        from the store (another instance's `roster` event, or events lost: docs/operations.md,
        "Many instances")."""
        self.rosters.forget_roster(home, keep=self._uplinks)

    async def wait_roster(self, home: str, accept: Callable[[Roster], bool]) -> Roster:
        """`Rosters.wait_roster`: wait until `home`'s newest roster satisfies `accept`."""
        return await self.rosters.wait_roster(home, accept)

    def roster_behind(self, home: str, agent_key: bytes) -> RosterBehind | None:
        """`Rosters.roster_behind`: whether `home`'s box is behind for `agent_key`, or None."""
        return self.rosters.roster_behind(home, agent_key)

    @property
    def rosters_behind_count(self) -> int:
        """Homes whose connected box sent an older roster than the held one."""
        return self.rosters.rosters_behind_count

    async def watch_home_keys(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """`Rosters.watch_home_keys` until cancelled: when another process wrote the store
        (e.g. `ftwbridge home enroll`), `check_home_keys` at once (docs/operations.md, "A re-enrolled home key")."""
        await self.rosters.watch_home_keys(self.check_home_keys, task_status=task_status)

    async def check_home_keys(self) -> list[str]:
        """`Rosters.check_home_keys`: apply the home keys changed in the store; each such
        home's uplink is closed 4401 (its box dials again and must sign with the new key).
        Returns the homes changed."""
        return await self.rosters.check_home_keys(self._uplinks, self._close_for_new_key)

    async def _close_for_new_key(self, home: str) -> None:
        uplink = self._uplinks.get(home)
        if uplink is not None:
            await close_ws(uplink.ws, CLOSE_BAD_SIGNATURE, "home key changed")

    async def _bad_message(self, ws: WebSocketLike, why: str) -> None:
        """Close an uplink that sent a message breaking part C (4400), logged and counted."""
        log.warning(
            "connection fault from %s (door): %s; that connection is closed",
            getattr(ws, "remote_addr", "?"),
            why,
        )
        if self.events.fault is not None:
            self.events.fault("door")
        await close_ws(ws, CLOSE_BAD_MESSAGE, "bad message")

    def _dropped_to_box(self) -> None:
        self.stats.dropped_to_box += 1

    def limits(self, home: str, *, outbound: bool) -> Limits:
        """`home`'s door limits toward the box (`outbound`) or from it; they outlive uplinks."""
        lim = self._buckets.get((home, outbound))
        if lim is None:
            c = self.config
            lim = Limits(
                TokenBucket(c.door_msgs_burst, c.door_msgs_per_s),
                TokenBucket(c.door_bytes_burst, c.door_bytes_per_s),
            )
            self._buckets[(home, outbound)] = lim
        return lim

    @property
    def uplink_count(self) -> int:
        """Boxes connected now."""
        return len(self._uplinks)

    @property
    def tunnel_count(self) -> int:
        """Tunnels open now, across every uplink (one per agent session that has opened one)."""
        return sum(len(uplink.tuns) for uplink in self._uplinks.values())

    def online(self, home: str) -> bool:
        """Whether `home` has an uplink now."""
        return home in self._uplinks

    async def send_to_box(self, home: str, env: Envelope) -> None:
        """Send one door message to `home`'s box (e.g. `agent.request`).

        Raises:
            HomeOffline: the home has no uplink.
        """
        uplink = self._uplinks.get(home)
        if uplink is None or uplink.closed:
            raise HomeOffline(home)
        await uplink.send_raw(env.encode())

    def take_claim(self, digest: bytes, now_ms: int) -> str | None:
        """The home whose open claim offer has this code hash (used once), or None."""
        offer = self.claims.pop(digest, None)
        if offer is None or now_ms >= offer[1]:
            return None
        return offer[0]

    async def open_tun(self, home: str) -> Tun:
        """A new tunnel to `home`'s box.

        Raises:
            HomeOffline: the home has no uplink.
        """
        uplink = self._uplinks.get(home)
        if uplink is None or uplink.closed:
            raise HomeOffline(home)
        t = Tun(uplink, uplink.new_sid())
        uplink.tuns[t.sid] = t
        return t

    async def close_all(self, code: int, reason: str) -> None:
        """Close every uplink with a Close frame `code` (e.g. 1001 at drain), all at once, each
        bounded by `close_ws`; their handlers then end their tunnels as for any uplink lost."""
        async with trio.open_nursery() as nursery:
            for uplink in list(self._uplinks.values()):
                nursery.start_soon(close_ws, uplink.ws, code, reason)

    async def supersede(self, home: str) -> None:
        """Close `home`'s uplink with 4409 (superseded): another instance took the home over
        (docs/operations.md, "Many instances"). Nothing when it has none here."""
        uplink = self._uplinks.get(home)
        if uplink is not None:
            self.stats.takeovers += 1
            uplink.end_all(TunEndReason.SUPERSEDED.value)
            await close_ws(uplink.ws, CLOSE_SUPERSEDED, "taken over at another instance")

    async def serve_uplink(self, ws: WebSocketLike) -> None:
        """Run one box uplink until it closes (the `/v1/box` WebSocket handler calls this)."""
        home = await self._authenticate_fairly(ws)
        if home is None:
            return
        uplink = Uplink(
            home, ws, limits=self.limits(home, outbound=True), on_dropped=self._dropped_to_box
        )
        older = self._uplinks.get(home)
        self._uplinks[home] = uplink
        if older is not None:
            self.stats.takeovers += 1
            older.end_all(TunEndReason.SUPERSEDED.value)
            await close_ws(older.ws, CLOSE_SUPERSEDED, "superseded")
        log.info("uplink up home=%s", home)
        try:
            if self.events.uplink_up is not None:
                await self.events.uplink_up(home)
            await self._read(uplink)
        finally:
            uplink.end_all(LocalEnd.UPLINK_LOST.value)
            if self._uplinks.get(home) is uplink:
                del self._uplinks[home]
                self.rosters.forget_behind(home)  # its next uplink sends its roster again
                if self.events.uplink_down is not None:
                    with trio.CancelScope(shield=True), trio.move_on_after(HOOK_DOWN_S):
                        await self.events.uplink_down(home)
            log.info("uplink down home=%s", home)

    async def _authenticate_fairly(self, ws: WebSocketLike) -> str | None:
        """`_authenticate` in one of `strangers`' slots, keyed on the box's address: an
        uplink refused a slot, or shed by a lighter address's, is closed 1013 (try again
        later, RFC 6455 section 7.4.1) and counted as refused (`strangers`)."""
        source = str(getattr(ws, "remote_addr", "?"))
        try:
            with self.strangers.hold(source) as scope, scope:
                return await self._authenticate(ws)
        except SlotRefused:
            pass
        self._uplink_refused("strangers")
        await close_ws(ws, CLOSE_TRY_LATER, "too many unauthenticated uplinks; try again later")
        return None

    async def _authenticate(self, ws: WebSocketLike) -> str | None:
        nonce = os.urandom(NONCE_BYTES)
        body = {"nonce": nonce, "nowMs": self.wall_ms()}
        try:
            await ws.send(Envelope(Msg.DOOR_CHALLENGE, None, body).encode())
        except WS_GONE:
            return None
        with trio.move_on_after(self.config.door_hello_s):
            raw = await ws.receive()
            try:
                env = decode_door_message(raw)
            except RemoteProtocolError as exc:
                await self._bad_message(ws, str(exc))
                return None
            b: Any = env.b if isinstance(env.b, dict) else {}
            home, sig = b.get("home"), b.get("sig")
            if env.t != Msg.DOOR_HELLO or not isinstance(home, str) or not isinstance(sig, bytes):
                self._uplink_refused("no_hello")
                await close_ws(ws, CLOSE_BAD_SIGNATURE, "door.hello expected")
                return None
            key = await self.rosters.home_key(home)
            if key is None:
                self._uplink_refused("unknown_home")
                self._refusal_log.warn(
                    "unknown_home",
                    home,
                    "uplink refused home=%s from %s: unknown home (close 4403); enroll it with "
                    "`ftwbridge home enroll` if it is yours",
                    peer_text(home),
                    getattr(ws, "remote_addr", "?"),
                )
                await close_ws(ws, CLOSE_UNKNOWN_HOME, "unknown home")
                return None
            if not verify_door_signature(key, nonce, home, sig):
                self._uplink_refused("bad_signature")
                self._refusal_log.warn(
                    "bad_signature",
                    home,
                    "uplink refused home=%s from %s: bad signature (close 4401); the box signs "
                    "with another key than the one enrolled: enroll the box's key again",
                    peer_text(home),
                    getattr(ws, "remote_addr", "?"),
                )
                await close_ws(ws, CLOSE_BAD_SIGNATURE, "bad signature")
                return None
            return home
        self._uplink_refused("no_hello")
        await close_ws(ws, CLOSE_BAD_SIGNATURE, "no door.hello in time")
        return None

    def _uplink_refused(self, reason: str) -> None:
        self.stats.uplinks_refused += 1
        by = self.stats.uplinks_refused_by
        by[reason] = by.get(reason, 0) + 1

    async def _read(self, uplink: Uplink) -> None:
        while not uplink.closed:
            raw = await uplink.ws.receive()
            try:
                env = decode_door_message(raw)
            except RemoteProtocolError as exc:
                await self._bad_message(uplink.ws, str(exc))
                return
            await dispatch(self, uplink, env, raw)
