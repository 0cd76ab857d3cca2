"""The stub box on the wire: dial the bridge's door, authenticate, publish rosters, carry tuns.

`StubHome` bundles a home's owner (keys and roster), its box brain and its clocks;
`stubbox.dial.run_uplink(stub, url)` keeps its uplink up. The door protocol is PROTOCOL.md
part C.

With `StubHome.keep_state(path)` the owner's state (newest signed roster, waiting requests)
is kept in a file (stubbox/state.py) and restored at start. The owner's changes, each run
whole and one at a time, are in `stubbox/changes.py` (`OwnerChanges`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import trio
from trio_websocket import ConnectionClosed, WebSocketConnection

from ftwbridge.proto.door import door_signature, tun, tun_fields
from ftwbridge.proto.envelope import Envelope, decode_envelope
from ftwbridge.proto.errors import ProtocolError
from ftwbridge.proto.registry import Msg

from .box import Box, ClockSource
from .changes import OwnerChanges
from .goal_timer import GoalTimer
from .home import DEFAULT_TZ, Home
from .owner import Owner
from .state import StateError, StateKeeper

log = logging.getLogger("stubbox")
BUILD = "stubbox-0.1"


class StubHome(OwnerChanges):
    """One simulated home: owner, box brain, clocks, and the current uplink.

    Args:
        home: the home id.
        seed: text seed of its keys; `sim_seed` seeds the simulated site.
        noise: whether its roster names a Noise key (takes assistants).
        clock_source: `ntp`, `rtc` or `none`.
        hostile: put hidden characters into names, events and logs.
        answer_delay_ms: how long each read takes at the box.
        clock: the box's wall clock in ms since the epoch (tests inject one).
        read_limit: False lifts the box's 60 reads per agent per minute (benchmarks only).
        tz: the box's IANA time zone (`hello_ok.box.tz`, where energy buckets start).
        still: readings hold the 5-minute slots' values instead of moving every second as a
            meter's do (`stubbox.flicker`, seeded by `sim_seed` and `home`); tests and benches
            that want exact values.
    """

    def __init__(
        self,
        home: str,
        *,
        seed: str,
        sim_seed: int = 1,
        noise: bool = True,
        clock_source: ClockSource = "ntp",
        hostile: bool = False,
        answer_delay_ms: int = 0,
        clock: Callable[[], int] | None = None,
        read_limit: bool = True,
        tz: str = DEFAULT_TZ,
        still: bool = False,
    ) -> None:
        self._clock = clock
        self.started = time.monotonic() if clock is None else clock() / 1000
        self.clock_offset_ms = 0
        self.owner = Owner(home, seed=seed, noise=noise, issued_at_ms=self.wall_ms())
        self.box = Box(
            home=Home(seed=sim_seed, hostile=hostile, tz=tz, home_id=home, still=still),
            roster=self.owner.roster,
            noise_private=self.owner.noise_private,
            box_id=f"stub-{home}",
            clock_source=clock_source,
            answer_delay_ms=answer_delay_ms,
            read_limit=read_limit,
        )
        self.hold = False
        self.connected = trio.Event()
        self.ws: WebSocketConnection | None = None
        self._send_lock = trio.Lock()
        self.last_roster_reply: dict[str, Any] = {}
        self.requests: dict[str, dict[str, Any]] = {}
        """Assistants waiting for the owner's answer (`agent.request` bodies by `req`)."""
        self.approve_all = False
        self.uplinks = 0
        self.stopping = False
        """Set when the process stops: `run_uplink` dials no more."""
        self.keeper: StateKeeper | None = None
        """Writes the owner's state to its file (None: kept in memory only)."""
        self._changing = trio.Lock()
        self.goal_timer = GoalTimer(self.wall_ms)
        """Pushes a goal request's expiry when it runs out (run by `run_session`)."""
        self._pulse_wake = trio.Event()
        """Set when a subscription starts, so the pulse timer looks at its due time again."""

    def wall_ms(self) -> int:
        """The box's wall clock (ms since the epoch), shifted by `clock_offset_ms`."""
        now = time.time_ns() // 1_000_000 if self._clock is None else self._clock()
        return now + self.clock_offset_ms

    def uptime_ms(self) -> int:
        """Ms since this stub started."""
        now_s = time.monotonic() if self._clock is None else self._clock() / 1000
        return int((now_s - self.started) * 1000)

    async def send(self, data: bytes) -> None:
        """Send one door message on the current uplink (dropped while there is none)."""
        ws = self.ws
        if ws is None:
            return
        async with self._send_lock:
            try:
                await ws.send_message(data)
            except ConnectionClosed:
                return

    async def _goals_moved(self, before: int) -> None:
        """After an agent's message: expire goal requests that waited 24 h (their agents hear
        `agent.decided {expired}`), approve waiting ones when the owner approves everything,
        and keep the book in the state file when it changed."""
        for sid, message in self.box.expire_goals(self.wall_ms()):
            await self.send(tun(sid, message))
        if self.approve_all:
            for entry in self.box.goals.waiting(self.wall_ms()):
                await self.decide(entry.record.req_id, True)
        await self._keep_goals(before)

    async def _keep_goals(self, before: int) -> None:
        """Write the state file when the goal book moved past `before`; a failed write is
        logged and the book stays in memory (the uplink stays up)."""
        if self.keeper is not None and self.box.goals.version != before:
            try:
                await self.keeper.save()
            except StateError as exc:
                log.warning("home %s: %s", self.home, exc)

    async def drop_uplink(self) -> None:
        """Close the current uplink abruptly (a box that vanishes); it reconnects later."""
        ws = self.ws
        if ws is not None:
            with trio.move_on_after(1):
                await ws.aclose(code=1001)

    async def run_session(self, ws: WebSocketConnection) -> None:
        """Serve one uplink connection until it closes (authenticate, publish, carry tuns)."""
        challenge = decode_envelope(_binary(await ws.get_message()))
        nonce = challenge.b.get("nonce") if isinstance(challenge.b, dict) else None
        if challenge.t != Msg.DOOR_CHALLENGE or not isinstance(nonce, bytes):
            raise ProtocolError("expected door.challenge")
        sig = door_signature(self.owner.signing_key, nonce, self.home)
        hello = Envelope(Msg.DOOR_HELLO, None, {"home": self.home, "build": BUILD, "sig": sig})
        await ws.send_message(hello.encode())
        sent = self.owner.signed
        await ws.send_message(Envelope(Msg.ROSTER, None, {"roster": sent}).encode())
        self.box.end_all()  # tunnels belong to one uplink; a new uplink starts afresh
        self.ws = ws
        if self.owner.signed != sent:  # the owner signed a newer one while we connected: its
            # publish found no uplink, so this one carries it
            await self.send(Envelope(Msg.ROSTER, None, {"roster": self.owner.signed}).encode())
        self.uplinks += 1
        self.connected.set()
        failure: Exception | None = None
        try:
            async with trio.open_nursery() as nursery:  # the expiry timer lives with the uplink
                nursery.start_soon(
                    self.goal_timer.run, lambda: self.box.goals.next_expiry_ms(), self._expire
                )
                nursery.start_soon(self._pulses)
                try:
                    while True:
                        await self._handle(decode_envelope(_binary(await ws.get_message())))
                except Exception as exc:  # raised as itself below, not inside a group
                    failure = exc
                finally:
                    nursery.cancel_scope.cancel()
        finally:
            if self.ws is ws:
                self.ws = None
                self.connected = trio.Event()
                self.box.end_all()
        if failure is not None:
            raise failure

    async def _pulses(self) -> None:
        """Send the telemetry frames of each due pulse (PROTOCOL.md part F) until cancelled;
        with nobody subscribed, wait for a `sub`."""
        while True:
            due = self.box.streams.next_due_ms()
            wake = self._pulse_wake
            if due is None:
                await wake.wait()
            else:
                with trio.move_on_after(max(0, due - self.uptime_ms()) / 1000):
                    await wake.wait()
            if wake.is_set():
                self._pulse_wake = trio.Event()
                continue
            try:
                for sid, message in self.box.pulse(self.wall_ms(), self.uptime_ms()):
                    await self.send(tun(sid, message))
            except (trio.ClosedResourceError, trio.BrokenResourceError):
                return  # the uplink is closing under us: its reader ends the session

    async def _expire(self) -> None:
        """The goal timer's turn: expire what ran out, keep the book, push `agent.decided`."""
        async with self._changing:
            before = self.box.goals.version
            pushes = self.box.expire_goals(self.wall_ms())
            await self._keep_goals(before)
        for sid, message in pushes:
            await self.send(tun(sid, message))

    async def _handle(self, env: Envelope) -> None:
        if env.t == Msg.TUN:
            sid, d = tun_fields(env.b)
            if self.hold:
                return
            if not self.box.has_session(sid):
                m2 = self.box.handshake(sid, d, self.wall_ms())
                if m2 is not None:
                    await self.send(tun(sid, m2))
                return
            before, streams = self.box.goals.version, len(self.box.streams)
            out = self.box.receive(sid, d, self.wall_ms(), self.uptime_ms())
            if len(self.box.streams) != streams:
                self._pulse_wake.set()
            await self._keep_goals(before)  # a queued request is on disk before the agent hears
            if self.box.goals.version != before:
                self.goal_timer.wake()
            if out and self.box.last_delay_ms:
                await trio.sleep(self.box.last_delay_ms / 1000)
            for message in out:
                await self.send(tun(sid, message))
            await self._goals_moved(self.box.goals.version)
        elif env.t == Msg.TUN_END:
            b = env.b if isinstance(env.b, dict) else {}
            if isinstance(b.get("sid"), int):
                self.box.end(b["sid"])
        elif env.t == Msg.AGENT_REQUEST:
            b = env.b if isinstance(env.b, dict) else {}
            req, key, scopes = b.get("req"), b.get("key"), b.get("scopes")
            if (
                isinstance(req, str)
                and isinstance(key, bytes)
                and len(key) == 32
                and isinstance(scopes, list)
            ):
                await self._asked(req, b)
        elif env.t in (Msg.ROSTER_OK, Msg.ROSTER_REFUSED):
            self.last_roster_reply = {"t": env.t, **(env.b if isinstance(env.b, dict) else {})}

    async def _asked(self, req: str, body: dict[str, Any]) -> None:
        """An assistant asks (`agent.request`): it waits for the owner, kept in the state file
        (with `approve_all`, the owner approves at once). A failed write is logged and the
        request waits in memory only: the uplink stays up."""
        try:
            if self.approve_all:
                self.requests[req] = body
                await self.approve(req)
            else:

                def change() -> None:
                    self.requests[req] = body

                await self._change(change)
        except StateError as exc:
            self.requests[req] = body
            log.warning("home %s: %s", self.home, exc)


def _binary(message: str | bytes) -> bytes:
    if not isinstance(message, bytes):
        raise ProtocolError("door messages are binary")
    return message
