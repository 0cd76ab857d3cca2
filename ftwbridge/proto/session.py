"""One Noise session's messages after the handshake, for either side (PROTOCOL.md part A).

`channel.Channel` turns envelopes into transport messages and back (frame, pad, seal / open,
unpad, decode). `AgentSession` is the initiator's state machine on top of it: it numbers requests,
allows one in flight, gathers `hist.chunk`s until `hist.end`, matches answers to requests by
their own `id` only, and answers an unknown `t` that carries an id with `E_UNKNOWN_OP {t}`.
An authentication failure or replay moves it to ERROR for good (STYLE habit 2); an
undecodable frame or envelope is dropped, as the contract says.

Control (PROTOCOL.md part E; message shapes in `proto/control.py`):

- `command(op, args, cmd_id=..., now_ms=...)` sends `cmd` on lane 0. The command is the
  session's one request in flight until its `cmd.result`: the `cmd.ack` in between comes out
  of `receive` as an `Acked` event and does not end it; `cmd.result` comes out as a `Reply`
  whose `body` is a `control.CmdResult`; an `error` answer (a refusal before acting) as
  `Failed`. `expect.rev` is the newest `controlRev` the session has seen in any answer
  (`control_rev`; None until one came: read `loadpoints.get` first), and `notValidAfterMs`
  is computed from the newest box uptime seen (`uptimeMs` or `clock.uptimeMs` of an answer,
  noted with the `now_ms` that `receive` was given) by `control.not_valid_after_ms`.
- `goal.request` and `requests.get` go through `request`; their `Reply.body` is a
  `control.GoalQueued` or a `control.RequestList`.
- A control answer whose body breaks its shape, whose `cmdId` is not the command's, or whose
  type is not one of the request's answers ends the call with `Failed(E_BAD_BODY)`.
- Telemetry (part F): `subscribe(body)` sends `sub` with an id of its own, outside the one
  request in flight; the first `snap` (or `error`) on that id comes out as a `Push` with
  `answers_sub`, and every id-less `snap`, `delta` and `tick` as a plain `Push` (`truncated`
  when its frame had flag 0x02). `modes` keeps `hello_ok.modes`, which a snap's mode indexes.
- `agent.decided` has no id: it comes out as `Push(t, control.Decided)` whatever is in flight
  (a read stays in flight) and answers no call; a malformed one is dropped and counted in
  `bad_pushes`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from .channel import Channel as Channel  # where it lived first: callers import it here
from .control import BadBody, Cmd, CmdAck, CmdResult, Decided, GoalQueued, RequestList
from .control import not_valid_after_ms as _nva
from .envelope import MAX_ID, Envelope
from .errors import LocalProtocolError, RemoteProtocolError
from .frame import DEFAULT_CONTROL_BUCKET, FLAG_TRUNCATED
from .names import Answer, Code, GoalMsg, Read
from .noise import TransportKeys
from .refusal import Refusal
from .registry import Msg, peer_code, peer_retry_ms
from .telemetry import TelemetryMsg

SUB = TelemetryMsg.SUB.value
SNAP = TelemetryMsg.SNAP.value


class State(Enum):
    """An agent session's state: OPEN (usable), ERROR (poisoned), CLOSED (terminated by the box)."""

    OPEN = "open"
    ERROR = "error"
    CLOSED = "closed"


@dataclass(frozen=True, slots=True)
class Reply:
    """The answer to request `id`: its type `t` and body. For `hist.query`, `t` is `hist.end`,
    `body` is the `hist.end` body, and `chunks` holds every `hist.chunk` body in order."""

    id: int
    t: str
    body: Any
    chunks: tuple[Any, ...] = ()
    size: int = 0
    """Bytes of the transport messages that brought this answer (for byte pacing)."""


@dataclass(frozen=True, slots=True)
class Failed:
    """An `error` answer to request `id`, as a `Refusal` (its code and retry hint cleaned)."""

    id: int
    refusal: Refusal


@dataclass(frozen=True, slots=True)
class Terminated:
    """The box ended the session (`session.terminate {reason}`)."""

    reason: str


@dataclass(frozen=True, slots=True)
class Push:
    """A message with no id; it answers no call. For `agent.decided`, `body` is a checked
    `control.Decided`; for others (`hello_ok`, an id-less `error`) the raw body."""

    t: str
    body: Any
    truncated: bool = False
    """Its frame had flag 0x02 (a telemetry `delta` cut short, PROTOCOL.md part F)."""
    answers_sub: bool = False
    """The first `snap` of a subscription, or its `error`, on the `sub`'s id (part F): it
    answers no call either, since a `sub` never holds the session's request in flight."""


@dataclass(frozen=True, slots=True)
class Acked:
    """`cmd.ack` for command `id`: the box acted and holds a lease (`ack.expires_at_ms`, wall
    clock). The command stays in flight until its `cmd.result` (a `Reply`)."""

    id: int
    ack: CmdAck


SessionEvent = Reply | Failed | Terminated | Push | Acked

_MAX_CHUNKS = 64
"""Most `hist.chunk`s one answer may bring (16 series x 2000 points fits well inside)."""


@dataclass(slots=True)
class _Pending:
    id: int
    t: str
    chunks: list[Any] = field(default_factory=list)
    nbytes: int = 0
    cmd_id: str | None = None


class AgentSession:
    """The initiator's side of one session (sans-I/O).

    `request(t, body)` -> (id, message bytes); `receive(message)` -> list of `SessionEvent`s;
    `data_to_send()` -> messages the session must send on its own (answers to unknown types).
    """

    def __init__(self, keys: TransportKeys, *, control_bucket: int = DEFAULT_CONTROL_BUCKET):
        self._channel = Channel(keys, control_bucket=control_bucket)
        self.session_id = keys.handshake_hash
        self.state = State.OPEN
        self._next_id = 1
        self._pending: _Pending | None = None
        self._outbox: list[bytes] = []
        self.stray_answers = 0
        self.bad_pushes = 0
        self.control_rev: int | None = None
        """The newest `controlRev` seen in an answer (part E `expect.rev`), or None."""
        self.box_uptime_ms: int | None = None
        """The box uptime (ms) of the newest answer that carried one, or None."""
        self.uptime_seen_at_ms: int | None = None
        """The `now_ms` given to `receive` when `box_uptime_ms` came (the caller's clock)."""
        self.modes: tuple[str, ...] = ()
        """`hello_ok.modes` (a telemetry snap's mode field indexes it, part F)."""
        self.sub_id: int | None = None
        """The id of a `sub` whose first `snap` has not come (part F), or None."""

    @property
    def busy(self) -> bool:
        """True while a request waits for its answer (one in flight per session, part B)."""
        return self._pending is not None

    def _check_open(self) -> None:
        if self.state is not State.OPEN:
            raise LocalProtocolError(f"session is {self.state.value}")

    def request(self, t: str, body: Any = None) -> tuple[int, bytes]:
        """Start request `t` with `body`; returns (request id, transport message).

        Raises:
            LocalProtocolError: the session is not OPEN, a request is already in flight, or
                `t` is `cmd` (use `command`).
        """
        if t == Msg.CMD:
            raise LocalProtocolError("commands go through AgentSession.command")
        return self._start(t, body, bulk=True)  # reads ride lane 1, as upstream

    def _start(
        self, t: str, body: Any, *, bulk: bool, cmd_id: str | None = None
    ) -> tuple[int, bytes]:
        self._check_open()
        if self._pending is not None:
            raise LocalProtocolError("a request is already in flight on this session")
        rid = self._next_id
        message = self._channel.wrap(Envelope(t, rid, body), bulk=bulk)
        self._next_id = 1 if rid >= MAX_ID else rid + 1
        self._pending = _Pending(rid, t, cmd_id=cmd_id)
        return rid, message

    def not_valid_after_ms(self, now_ms: int) -> int:
        """`notValidAfterMs` for a command sent at `now_ms` (the clock given to `receive`):
        the newest box uptime seen plus the time since, plus 20 s (part E).

        Raises:
            LocalProtocolError: no answer has carried the box's uptime yet.
        """
        if self.box_uptime_ms is None:
            raise LocalProtocolError("no box uptime seen yet: the session has had no hello_ok")
        seen = self.uptime_seen_at_ms if self.uptime_seen_at_ms is not None else now_ms
        return _nva(self.box_uptime_ms, now_ms - seen)

    def command(
        self,
        op: str,
        args: dict[str, Any],
        *,
        cmd_id: str,
        now_ms: int,
        expect_rev: int | None = None,
    ) -> tuple[int, bytes]:
        """Start command `op` with `args` (e.g. `control.Hold(...).to_args()`) as `cmd_id`
        (`control.new_cmd_id`; the same id for a retry of the same call, part E) at `now_ms`
        (the caller's clock, as given to `receive`); returns (request id, transport message)
        on lane 0. `expect_rev` defaults to `control_rev`.

        Raises:
            LocalProtocolError: the session is not OPEN, a request is in flight, no
                `controlRev` or box uptime has been seen, or the body cannot be encoded.
        """
        rev = self.control_rev if expect_rev is None else expect_rev
        if rev is None:
            raise LocalProtocolError("no controlRev seen yet: read loadpoints.get first")
        cmd = Cmd(cmd_id, op, args, self.not_valid_after_ms(now_ms), rev)
        return self._start(Msg.CMD, cmd.to_body(), bulk=False, cmd_id=cmd_id)

    def subscribe(self, body: Any) -> tuple[int, bytes]:
        """A `sub {bucket, hz}` on lane 0 with an id of its own (PROTOCOL.md part F); returns
        (its id, the transport message). It does not take the request in flight: the box
        answers it with the first `snap`, which comes out of `receive` as a `Push` with
        `answers_sub`, and reads and commands go on beside it.

        Raises:
            LocalProtocolError: the session is not OPEN.
        """
        self._check_open()
        rid = self._next_id
        self._next_id = 1 if rid >= MAX_ID else rid + 1
        self.sub_id = rid
        return rid, self._channel.wrap(Envelope(SUB, rid, body))

    def notify(self, t: str, body: Any = None) -> bytes:
        """A message without an id (`hello`); returns its transport message.

        Raises:
            LocalProtocolError: the session is not OPEN.
        """
        self._check_open()
        return self._channel.wrap(Envelope(t, None, body))

    def notify_encoded(self, payload: bytes) -> bytes:
        """As `notify`, for an id-less envelope encoded once (`Envelope(t, None, body).encode()`)
        by a caller that sends it on every session. Raises LocalProtocolError if not OPEN."""
        self._check_open()
        return self._channel.wrap_encoded(payload)

    def abandon(self, *, sent: bool = True) -> None:
        """The request in flight lost its caller. A request that was `sent` stays in flight:
        the box is still working on it (one request per session, part B), and its answer still
        comes out of `receive` for whoever holds the session to drop. One never sent is
        forgotten."""
        if not sent:
            self._pending = None

    def data_to_send(self) -> list[bytes]:
        """Take the messages the session queued on its own."""
        out, self._outbox = self._outbox, []
        return out

    def receive(self, message: bytes, *, now_ms: int | None = None) -> list[SessionEvent]:
        """Feed one transport message from the box, received at `now_ms` (the caller's clock,
        ms; only needed for commands' `notValidAfterMs`); returns what it means.

        Raises:
            LocalProtocolError: the session is not OPEN.
            RemoteProtocolError: authentication failure or replay; the session is then ERROR.
        """
        self._check_open()
        try:
            env, flags = self._channel.unwrap_flagged(message)
        except RemoteProtocolError:
            self.state = State.ERROR
            self._pending = None
            raise
        if env is None:
            return []
        if self._pending is not None and env.id == self._pending.id:
            self._pending.nbytes += len(message)
        self._note(env, now_ms)
        if env.id is not None and env.id == self.sub_id and env.t in (SNAP, Msg.ERROR):
            self.sub_id = None
            return [Push(env.t, env.b, answers_sub=True)]
        if env.id is None and flags & FLAG_TRUNCATED:
            return [Push(env.t, env.b, truncated=True)]
        return self._dispatch(env)

    def _note(self, env: Envelope, now_ms: int | None) -> None:
        """Keep the newest `controlRev` and box uptime an answer carries (part E)."""
        if not isinstance(env.b, dict) or env.t == Msg.ERROR:
            return
        modes = env.b.get("modes") if env.t == Msg.HELLO_OK else None
        if isinstance(modes, list) and all(isinstance(m, str) for m in modes):
            self.modes = tuple(modes)
        rev = env.b.get("controlRev")
        if _uint(rev):
            self.control_rev = rev
        clock = env.b.get("clock")
        up = clock.get("uptimeMs") if isinstance(clock, dict) else env.b.get("uptimeMs")
        if _uint(up):
            self.box_uptime_ms, self.uptime_seen_at_ms = up, now_ms

    def _dispatch(self, env: Envelope) -> list[SessionEvent]:
        if env.t == Msg.SESSION_TERMINATE:
            self.state = State.CLOSED
            self._pending = None
            body = env.b if isinstance(env.b, dict) else {}
            return [Terminated(str(body.get("reason", "")))]
        if env.id is None:
            if env.t == Msg.AGENT_DECIDED:
                try:
                    return [Push(env.t, Decided.parse(env.b))]
                except BadBody:
                    self.bad_pushes += 1
                    return []
            return [Push(env.t, env.b)]
        if env.t != Msg.ERROR and env.t != Answer.HIST_CHUNK and not _is_known_answer(env.t):
            # An unknown type with an id: answer E_UNKNOWN_OP {t} (part A).
            err = {"code": Code.E_UNKNOWN_OP.value, "retryable": False, "args": {"t": env.t}}
            self._outbox.append(self._channel.wrap(Envelope(Msg.ERROR, env.id, err)))
            return []
        pending = self._pending
        if pending is None or env.id != pending.id:
            self.stray_answers += 1
            return []
        if env.t == Msg.ERROR:
            self._pending = None
            return [_refusal(env)]
        if pending.t in _CONTROL:
            return self._control(pending, env)
        if env.t == Answer.HIST_CHUNK and pending.t == Read.HIST_QUERY:
            if len(pending.chunks) >= _MAX_CHUNKS:
                self._pending = None
                return [Failed(env.id, Refusal(Code.E_RESPONSE_TOO_LARGE))]
            pending.chunks.append(env.b)
            return []
        self._pending = None
        return [Reply(env.id, env.t, env.b, tuple(pending.chunks), pending.nbytes)]

    def _control(self, pending: _Pending, env: Envelope) -> list[SessionEvent]:
        """An answer to `cmd`, `goal.request` or `requests.get`, checked (module docstring)."""
        try:
            if env.t not in _CONTROL[pending.t]:
                raise BadBody("t", f"{env.t} does not answer {pending.t}")
            if env.t == Msg.CMD_ACK:
                ack = CmdAck.parse(env.b)
                if ack.cmd_id != pending.cmd_id:
                    raise BadBody("cmdId", "is not the command's")
                return [Acked(pending.id, ack)]
            body: Any
            if env.t == Msg.CMD_RESULT:
                body = CmdResult.parse(env.b)
                if body.cmd_id != pending.cmd_id:
                    raise BadBody("cmdId", "is not the command's")
            elif env.t == GoalMsg.GOAL_QUEUED:
                body = GoalQueued.parse(env.b)
            else:
                body = RequestList.parse(env.b)
        except BadBody as exc:
            self._pending = None
            return [Failed(pending.id, Refusal(Code.E_BAD_BODY, {"field": exc.field}))]
        self._pending = None
        return [Reply(pending.id, env.t, body, (), pending.nbytes)]


_CONTROL: dict[str, frozenset[str]] = {
    Msg.CMD: frozenset({Msg.CMD_ACK, Msg.CMD_RESULT}),
    GoalMsg.GOAL_REQUEST: frozenset({GoalMsg.GOAL_QUEUED}),
    Read.REQUESTS_GET: frozenset({Answer.REQUESTS}),
}
"""Control requests and the answer types each may get (besides `error`)."""
_KNOWN_ANSWERS = frozenset(
    {*Answer, Msg.HELLO_OK, Msg.CMD_ACK, Msg.CMD_RESULT, GoalMsg.GOAL_QUEUED}
)


def _uint(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**63


def _is_known_answer(t: str) -> bool:
    return t in _KNOWN_ANSWERS


def _refusal(env: Envelope) -> Failed:
    """The box's `error {code, args?, retryAfterMs?}` as a `Refusal`, its code made safe and its
    retry hint (its own, else its args') cleaned and capped (`registry.peer_*`)."""
    body = env.b if isinstance(env.b, dict) else {}
    args = body.get("args")
    details = args if isinstance(args, dict) else {}
    assert env.id is not None
    hint = peer_retry_ms(body.get("retryAfterMs"), details)
    return Failed(env.id, Refusal(peer_code(body.get("code")), details, hint))
