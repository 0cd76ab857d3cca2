"""The stub box's brain for agent sessions: a sans-I/O Noise responder that serves agent reads.

`Box.handshake(sid, message1, now_ms)` answers Noise message 1 with message 2, or with nothing
when the key is not admitted (a box that refuses a handshake sends nothing, PROTOCOL.md part
A). `Box.receive(sid, message, now_ms, uptime_ms)` returns the transport messages to send back.
`Box.set_roster(roster)` takes a newer roster and returns the `session.terminate {revoked}`
messages for every session whose agent it drops. Times: `now_ms` is the box's own wall clock
(ms since the epoch), `uptime_ms` its uptime; the shell passes both in.

Per read the box enforces, in this order (PROTOCOL.md part B, agents.yaml): the clock (a box
without one refuses agents, `E_UNAVAILABLE {subsystem: clock}`), expiry (`E_GRANT_EXPIRED` then
`session.terminate {expired}`), refused types (`api.req`, `E_OP_NOT_GRANTED`), the scope
(`E_SCOPE_DENIED {needScope}`; `goal.request` and `requests.get` need `ftw.goals.write`), one
request in flight and the rolling minute (`E_RATE_LIMITED {retryAfterMs}`), then the read's own
arguments, caps and limits. A `cmd` goes, after the clock, through part E's own order
(`stubbox/commands.py`); goal requests are kept in `stubbox/goals.py`, and `decide` /
`expire_goals` return the `agent.decided` pushes for the asking agent's open sessions.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, Literal

from ftwbridge.proto.control import EvTarget
from ftwbridge.proto.envelope import Envelope
from ftwbridge.proto.errors import ProtocolError
from ftwbridge.proto.frame import MAX_ENVELOPE_BYTES
from ftwbridge.proto.names import (
    Answer,
    Cap,
    Code,
    GoalMsg,
    Op,
    Read,
    RefusedToAgents,
    Role,
    TerminateReason,
)
from ftwbridge.proto.noise import Responder
from ftwbridge.proto.registry import CAPS, GOAL_REQUEST_SCOPE, READS, Msg
from ftwbridge.proto.roster import Admitted, AgentGrant, Roster, admit
from ftwbridge.proto.session import Channel
from ftwbridge.proto.telemetry import TelemetryMsg

from . import reads
from .charger import OWNER
from .commands import Commands
from .goals import Entry, GoalBook, decided
from .home import Home
from .problem import Problem, error_body, take_slot
from .telemetry import Streams

ClockSource = Literal["ntp", "rtc", "none"]
MINUTE_MS = 60_000
BOX_SESSION_LIMIT = CAPS[Cap.SESSIONS].ceiling


@dataclass(slots=True)
class _Session:
    sid: int
    key: bytes
    grant: AgentGrant
    channel: Channel
    busy_until_ms: int = 0
    closed: bool = False


@dataclass(slots=True)
class BoxStats:
    """What the box counted: handshakes refused, reads served, refusals by code."""

    handshakes_refused: int = 0
    reads: int = 0
    by_read: dict[str, int] = field(default_factory=dict)
    """Reads served by type (`live.get`, ...): what a measurement of a client's cost reads."""
    refusals: dict[str, int] = field(default_factory=dict)


class Box:
    """A home box's agent-facing brain (sans-I/O).

    Args:
        home: the simulated home that answers reads.
        roster: the box's current roster (its own, already trusted).
        noise_private: the box's Noise static private key (32 bytes).
        box_id: the id shown in `hello_ok.box.id`.
        clock_source: `ntp`, `rtc` or `none` (no clock: agents are refused).
        answer_delay_ms: how long each read takes; a second request inside it is refused.
        read_limit: False lifts the 60 reads per agent per minute (benchmarks only).
    """

    def __init__(
        self,
        *,
        home: Home,
        roster: Roster,
        noise_private: bytes,
        box_id: str = "stub",
        clock_source: ClockSource = "ntp",
        answer_delay_ms: int = 0,
        read_limit: bool = True,
    ) -> None:
        self.home = home
        self.read_limit = read_limit
        self.roster = roster
        self._noise_private = noise_private
        self.box_id = box_id
        self.clock_source: ClockSource = clock_source
        self.answer_delay_ms = answer_delay_ms
        self.frozen_ms: int | None = None
        """When set, the simulated home answers as at this time (tests compare exact values)."""
        self._sessions: dict[int, _Session] = {}
        self._recent: dict[bytes, deque[int]] = {}
        self.last_delay_ms = 0
        """How long the shell should hold the answers of the last `receive` (reads only)."""
        self.stats = BoxStats()
        self.commands = Commands(home)
        """Agents' commands: idempotency table, `cmds_per_hour`, part E's checks."""
        self.goals = GoalBook()
        """Agents' goal requests, waiting for the owner or decided (30 days)."""
        self.streams = Streams(home)
        """Agents' live telemetry subscriptions (PROTOCOL.md part F, `stubbox/telemetry.py`)."""

    # -- sessions ---------------------------------------------------------------------------

    def handshake(self, sid: int, message1: bytes, now_ms: int) -> bytes | None:
        """Answer Noise message 1 for tunnel `sid`; returns message 2, or None when refused.

        Refused (nothing sent): an undecodable message, a key the roster does not list as an
        agent, or an agent whose grant has expired by the box's clock.
        """
        responder = Responder(our_static=self._noise_private)
        try:
            their_key, _payload = responder.read_message1(message1)
        except ProtocolError:
            self.stats.handshakes_refused += 1
            return None
        decision = admit(self.roster, their_key, now_ms)
        grant: AgentGrant | None = None
        if isinstance(decision, Admitted):
            grant = decision.grant
        elif self.clock_source == "none" and decision.code is Code.E_GRANT_EXPIRED:
            row = self.roster.device(their_key)
            grant = row.agent if row is not None else None  # refused at hello, in words
        if grant is None:
            self.stats.handshakes_refused += 1
            return None
        message2, keys = responder.write_message2()
        self._sessions[sid] = _Session(sid, their_key, grant, Channel(keys))
        return message2

    def end(self, sid: int) -> None:
        """Forget tunnel `sid` (the bridge sent `tun.end`, or the uplink closed)."""
        self._sessions.pop(sid, None)
        self.streams.end(sid)

    def end_all(self) -> None:
        """Forget every tunnel (the uplink closed)."""
        self._sessions.clear()
        self.streams.clear()

    def has_session(self, sid: int) -> bool:
        """Whether tunnel `sid` carries an open session."""
        return sid in self._sessions

    @property
    def session_count(self) -> int:
        """Open agent sessions."""
        return len(self._sessions)

    def set_roster(self, roster: Roster) -> list[tuple[int, bytes]]:
        """Adopt a newer roster; returns (sid, `session.terminate {revoked}`) for dropped agents.
        A hold set by an agent the roster no longer lists, or whose grant lost the op, ends."""
        self.roster = roster
        out: list[tuple[int, bytes]] = []
        agents = roster.agents()
        holding = {k.hex() for k, g in agents.items() if Op.LOADPOINT_HOLD.value in g.ops}
        controls = self.home.controls
        for charger_id, held in list(controls.holds.items()):
            if held.by != OWNER and held.by not in holding:
                controls.release(charger_id)
        for sid, sess in list(self._sessions.items()):
            row = roster.device(sess.key)
            if sess.key not in agents or row is None or row.role != Role.AGENT:
                out.append((sid, self._terminate(sess, TerminateReason.REVOKED)))
            else:
                sess.grant = agents[sess.key]
        return out

    def _terminate(self, sess: _Session, reason: TerminateReason) -> bytes:
        sess.closed = True
        self._sessions.pop(sess.sid, None)
        self.streams.end(sess.sid)
        return sess.channel.wrap(Envelope(Msg.SESSION_TERMINATE, None, {"reason": reason.value}))

    # -- messages ---------------------------------------------------------------------------

    def receive(self, sid: int, message: bytes, now_ms: int, uptime_ms: int) -> list[bytes]:
        """Handle one transport message on tunnel `sid`; returns the messages to send back.

        A message that fails authentication is dropped, and so is one on an unknown tunnel.
        """
        self.last_delay_ms = 0
        sess = self._sessions.get(sid)
        if sess is None:
            return []
        try:
            env = sess.channel.unwrap(message)
        except ProtocolError:
            return []
        if env is None:
            return []
        if env.t == Msg.HELLO:
            return self._hello(sess, now_ms, uptime_ms)
        if env.id is None:
            return []  # a request without an id is dropped, as upstream
        try:
            return self._request(sess, env, now_ms, uptime_ms)
        except Problem as p:
            self.stats.refusals[p.code] = self.stats.refusals.get(p.code, 0) + 1
            out = [self._error(sess, env.id, p.code, p.args_, p.retry_after_ms)]
            if p.code is Code.E_GRANT_EXPIRED:
                out.append(self._terminate(sess, TerminateReason.EXPIRED))
            return out

    def _error(
        self, sess: _Session, rid: int | None, code: Code, args: dict[str, Any], retry: int | None
    ) -> bytes:
        return sess.channel.wrap(Envelope(Msg.ERROR, rid, error_body(code, args, retry)))

    def _hello(self, sess: _Session, now_ms: int, uptime_ms: int) -> list[bytes]:
        if self.clock_source == "none":
            return [self._error(sess, None, Code.E_UNAVAILABLE, {"subsystem": "clock"}, None)]
        if len(self._sessions) > BOX_SESSION_LIMIT:
            args = {
                "cap": Cap.SESSIONS.value,
                "max": BOX_SESSION_LIMIT,
                "asked": self.session_count,
            }
            return [self._error(sess, None, Code.E_CAP_EXCEEDED, args, None)]
        body = reads.hello_ok(self, sess.grant, now_ms, uptime_ms)
        return [sess.channel.wrap(Envelope(Msg.HELLO_OK, None, body), bulk=True)]

    def _request(self, sess: _Session, env: Envelope, now_ms: int, uptime_ms: int) -> list[bytes]:
        assert env.id is not None
        if self.clock_source == "none":
            raise Problem(Code.E_UNAVAILABLE, subsystem="clock")
        g = sess.grant
        home_ms = now_ms if self.frozen_ms is None else self.frozen_ms
        if env.t == Msg.CMD:  # part E's own order, idempotency first (stubbox/commands.py)
            answers = self.commands.handle(sess.key, g, env.b, now_ms, uptime_ms, home_ms=home_ms)
            return self._wrap(sess, env.id, answers, bulk=False)
        if now_ms >= g.expires_at_ms:
            raise Problem(Code.E_GRANT_EXPIRED, expiresAtMs=g.expires_at_ms)
        if env.t in set(RefusedToAgents):
            raise Problem(Code.E_OP_NOT_GRANTED, t=env.t)
        if env.t == GoalMsg.GOAL_REQUEST:
            if GOAL_REQUEST_SCOPE not in g.scopes:
                raise Problem(Code.E_SCOPE_DENIED, needScope=GOAL_REQUEST_SCOPE.value)
            self._count(sess, now_ms)
            queued = self.goals.ask(sess.key, g, env.b, now_ms)
            return self._wrap(sess, env.id, [(GoalMsg.GOAL_QUEUED, queued.to_body())])
        if env.t == TelemetryMsg.SUB:  # part F: answered by its first snap, never in flight
            snap = self.streams.subscribe(sess.sid, env.b, list(g.scopes), home_ms, uptime_ms)
            return [] if snap is None else self._wrap(sess, env.id, [(TelemetryMsg.SNAP, snap)])
        if env.t not in set(Read):
            raise Problem(Code.E_UNKNOWN_OP, t=env.t)
        need = READS[Read(env.t)].scope
        if need not in g.scopes:
            raise Problem(Code.E_SCOPE_DENIED, needScope=need.value)
        if env.t == Read.REQUESTS_GET:
            self._count(sess, now_ms)
            mine = self.goals.for_agent(sess.key, now_ms, max_bytes=reads.ANSWER_ROOM_BYTES)
            return self._wrap(sess, env.id, [(Answer.REQUESTS, mine.to_body())])
        if now_ms < sess.busy_until_ms:
            wait = sess.busy_until_ms - now_ms
            raise Problem(Code.E_RATE_LIMITED, wait, retryAfterMs=wait)
        self._count(sess, now_ms)
        sess.busy_until_ms = now_ms + self.answer_delay_ms
        self.last_delay_ms = self.answer_delay_ms
        answers = reads.answer(self, g, Read(env.t), env.b, home_ms, uptime_ms)
        self.stats.reads += 1
        self.stats.by_read[env.t] = self.stats.by_read.get(env.t, 0) + 1
        out = []
        for t, body in answers:
            out.append(sess.channel.wrap(Envelope(t, env.id, body), bulk=True))
        return out

    def _wrap(
        self, sess: _Session, rid: int, answers: list[tuple[str, Any]], *, bulk: bool = True
    ) -> list[bytes]:
        for t, body in answers:
            if t == Msg.ERROR:
                code = body["code"]
                self.stats.refusals[code] = self.stats.refusals.get(code, 0) + 1
        return [sess.channel.wrap(Envelope(t, rid, body), bulk=bulk) for t, body in answers]

    def pulse(self, now_ms: int, uptime_ms: int) -> list[tuple[int, bytes]]:
        """The telemetry frames due at this moment (`Streams.pulse`), sealed: (sid, message);
        a `snap` on the bulk lane, a `tick` or `delta` on lane 0 with its flags. A subscribed
        session whose grant has run out by the box's clock ends first (`session.terminate
        {expired}`): its stream ends with it."""
        home_ms = now_ms if self.frozen_ms is None else self.frozen_ms
        out = [
            (sess.sid, self._terminate(sess, TerminateReason.EXPIRED))
            for sess in list(self._sessions.values())
            if sess.sid in self.streams and now_ms >= sess.grant.expires_at_ms
        ]
        for sid, t, body, flags in self.streams.pulse(home_ms, uptime_ms):
            sess = self._sessions.get(sid)
            if sess is not None:
                message = sess.channel.wrap(
                    Envelope(t, None, body), bulk=t == TelemetryMsg.SNAP, flags=flags
                )
                out.append((sid, message))
        return out

    # -- the owner's decisions --------------------------------------------------------------

    def decide(self, req_id: str, approve: bool, now_ms: int) -> list[tuple[int, bytes]]:
        """The owner approves or denies goal request `req_id`; an approval makes the change as
        the owner (`ev_target` sets the car's target, `site_mode` the site's mode). Returns
        (sid, `agent.decided`) for each open session of the asking agent (it answers no call).

        Raises:
            KeyError: no such request. ValueError: it is no longer waiting.
        """
        entry = self.goals.decide(req_id, approve, now_ms)
        if approve:
            args = entry.record.args
            if isinstance(args, EvTarget):
                self.home.controls.set_target(args.car, args.soc_permille)
            else:
                self.home.controls.set_mode(args.mode.value)
        return self._pushes([entry])

    def expire_goals(self, now_ms: int) -> list[tuple[int, bytes]]:
        """Expire goal requests that waited 24 h; returns the `agent.decided {expired}` of
        every request that expired since the last call, whichever call noticed it."""
        self.goals.expire(now_ms)
        return self._pushes(self.goals.take_expired())

    def _pushes(self, entries: list[Entry]) -> list[tuple[int, bytes]]:
        out = []
        for entry in entries:
            body = decided(entry).to_body()
            for sess in self._sessions.values():
                if sess.key == entry.key:
                    out.append(
                        (sess.sid, sess.channel.wrap(Envelope(GoalMsg.AGENT_DECIDED, None, body)))
                    )
        return out

    def _count(self, sess: _Session, now_ms: int) -> None:
        """The rolling minute: at most `reads_per_min` (default and ceiling 60) per agent."""
        if not self.read_limit:
            return
        cap = sess.grant.cap(Cap.READS_PER_MIN)
        recent = self._recent.setdefault(sess.key, deque())
        take_slot(recent, now_ms, window_ms=MINUTE_MS, most=cap, cap=Cap.READS_PER_MIN.value)


__all__ = ["MAX_ENVELOPE_BYTES", "Box", "BoxStats", "Problem", "error_body"]
