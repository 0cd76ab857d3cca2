"""Opening one pooled session: the door tunnel, the Noise handshake through the keys part,
`hello` and `hello_ok` (PROTOCOL.md parts A to C). `Pool` runs `open_task` in a short task
per opening."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from ftwbridge.config import Config
from ftwbridge.door import Door, HomeOffline, LocalEnd, Tun, TunEnded
from ftwbridge.keys.service import KeysError, KeysPort
from ftwbridge.proto.envelope import Envelope
from ftwbridge.proto.errors import ProtocolError
from ftwbridge.proto.names import Code, TunEndReason
from ftwbridge.proto.noise import TransportKeys
from ftwbridge.proto.refusal import Refusal
from ftwbridge.proto.registry import Msg, peer_code, peer_reason
from ftwbridge.proto.roster import Roster
from ftwbridge.proto.session import AgentSession, Push, Terminated

from .session import PooledSession, State, refusal_for_end, session_clock_ms

HELLO_BODY = {
    "proto": {"min": 1, "max": 1},
    "app": {"build": "ftwbridge", "ua": "agent"},
    "locales": ["en"],
}
HELLO = Envelope(Msg.HELLO, None, HELLO_BODY).encode()
"""The `hello` envelope every opening sends, encoded once (about 26 k instructions an open)."""


def check_clock(hello_ok: dict[str, Any], now_ms: int, max_skew_ms: int) -> None:
    """Check the box's clock in `hello_ok` against ours (PROTOCOL.md part B: a box without a
    clock cannot judge expiry).

    Raises:
        Refusal: `E_UNAVAILABLE {subsystem: clock}` without a clock, `E_CLOCK_SKEW {skewMs,
            maxMs}` past `max_skew_ms`.
    """
    clock = hello_ok.get("clock")
    box_ms = clock.get("nowMs") if isinstance(clock, dict) else None
    if (
        isinstance(box_ms, bool)
        or not isinstance(box_ms, int)
        or (isinstance(clock, dict) and clock.get("source") == "none")
    ):
        raise Refusal(Code.E_UNAVAILABLE, {"subsystem": "clock"})
    skew = abs(box_ms - now_ms)
    if skew > max_skew_ms:
        raise Refusal(Code.E_CLOCK_SKEW, {"skewMs": skew, "maxMs": max_skew_ms})


async def open_session(
    s: PooledSession,
    roster: Roster,
    *,
    door: Door,
    keys: KeysPort,
    config: Config,
    wall_ms: Callable[[], int],
) -> None:
    """Open `s` (OPENING) to its home: a door tunnel, the Noise IK handshake through the keys
    part (message 1 out, message 2 back), `hello`, and a `hello_ok` whose clock is within
    `config.clock_skew_max_ms` (PROTOCOL.md parts A to C). On success the tunnel hands the
    box's messages to `s.deliver` and `s` is READY (or BUSY for its first waiter). A keys-part
    handshake that does not finish is aborted. The time bound (`config.handshake_s`) is the
    caller's: `open_task` runs this in `s.opening`, whose deadline it is.

    Raises:
        Refusal: the home is offline, the door dropped a message past its limit, the keys part
            or the box refused, or the box's clock is missing or off.
        TunEnded: the tunnel ended under the handshake.
    """
    assert roster.noise is not None
    try:
        tun = s.tun = await door.open_tun(s.home)
    except HomeOffline:
        raise Refusal(Code.E_UNAVAILABLE, {"subsystem": "door"}) from None
    tun.on_end = s.close
    transport = await _handshake(tun, s.agent_key, roster.noise, keys)
    s.agent = AgentSession(transport)
    if not await tun.send(s.agent.notify_encoded(HELLO)):
        raise Refusal(Code.E_RATE_LIMITED, {"retryAfterMs": 1000}, 1000)
    await _wait_hello_ok(s, wall_ms(), config.clock_skew_max_ms)
    while early := tun.queued():  # came after hello_ok, before the sink: in order
        for message in early:
            await s.deliver(message)
    if s.is_closed:
        return
    tun.attach(s.deliver)  # no await since the queue emptied: nothing out of order
    s.opened()


async def _handshake(
    tun: Tun, agent_key: bytes, their_static: bytes, keys: KeysPort
) -> TransportKeys:
    """The Noise IK handshake through the keys part over `tun`: message 1 out, message 2 back;
    returns the keys part's transport. A handshake that does not finish is aborted (shielded,
    1 s at most).

    Raises:
        Refusal: the door dropped message 1, or the keys part or the box refused.
        TunEnded: the tunnel ended under the handshake.
    """
    handle: int | None = None
    try:
        handle, m1 = await keys.begin(agent_key, their_static)
        if not await tun.send(m1):
            raise Refusal(Code.E_RATE_LIMITED, {"retryAfterMs": 1000}, 1000)
        m2 = await tun.receive()
        transport = await keys.finish(handle, m2)
        handle = None
        return transport
    except KeysError as exc:
        if exc.bad_message:  # the box's message 2 did not complete the handshake
            raise Refusal(Code.E_UNAVAILABLE, {"reason": "handshake_failed"}) from None
        what = "agent_key" if exc.unknown_key else "keys"
        raise Refusal(Code.E_UNAVAILABLE, {"subsystem": what}) from None
    finally:
        if handle is not None:
            with (
                trio.CancelScope(shield=True),
                trio.move_on_after(1),
                contextlib.suppress(KeysError),
            ):
                await keys.abort(handle)


async def open_outcome(
    s: PooledSession,
    roster: Roster,
    *,
    door: Door,
    keys: KeysPort,
    config: Config,
    wall_ms: Callable[[], int],
) -> str:
    """`open_session`, its failures turned into the session's close and the outcome word the
    pool reports (`ok`, `closed`, or the refusal's code; `PoolObserver.on_open`)."""
    try:
        await open_session(s, roster, door=door, keys=keys, config=config, wall_ms=wall_ms)
    except Refusal as exc:
        return _refused(s, exc)
    except TunEnded as exc:
        s.close(exc.reason)
        return "closed"
    except ProtocolError:
        s.close(LocalEnd.PROTOCOL_ERROR.value)
        return "closed"
    return "closed" if s.is_closed else "ok"  # closed from outside while it opened


def _refused(s: PooledSession, refusal: Refusal) -> str:
    """`s` closed as refused by `refusal` (its callers are told it); returns its code."""
    s.failure = refusal
    s.close(LocalEnd.REFUSED.value)
    return refusal.code


async def _wait_hello_ok(s: PooledSession, now_ms: int, max_skew_ms: int) -> None:
    assert s.agent is not None and s.tun is not None
    while True:
        message = await s.tun.receive()
        for ev in s.agent.receive(message, now_ms=session_clock_ms()):
            if isinstance(ev, Push) and ev.t == Msg.HELLO_OK and isinstance(ev.body, dict):
                check_clock(ev.body, now_ms, max_skew_ms)
                return  # nothing else of it is kept: 3 KiB a session
            if isinstance(ev, Push) and ev.t == Msg.ERROR and isinstance(ev.body, dict):
                args = ev.body.get("args")
                raise Refusal(
                    peer_code(ev.body.get("code")), args if isinstance(args, dict) else {}
                )
            if isinstance(ev, Terminated):
                raise refusal_for_end(peer_reason(ev.reason))


def opening_scope(config: Config) -> trio.CancelScope:
    """The scope a new session opens in (`PooledSession.opening`): cancelled by a close, and
    bounded to `config.handshake_s` seconds from when `open_task` enters it (message 1 out to
    `hello_ok` in, PROTOCOL.md part B)."""
    return trio.CancelScope(relative_deadline=config.handshake_s)


async def open_task(
    s: PooledSession,
    roster: Roster,
    *,
    door: Door,
    keys: KeysPort,
    config: Config,
    wall_ms: Callable[[], int],
    on_open: Callable[[str, float], None] | None,
    finish: Callable[[PooledSession], Awaitable[None]],
) -> None:
    """The short task that opens `s` (`open_outcome`) in its `opening` scope, tells
    `on_open(outcome, seconds)` (`ok`, a registry code, or `closed`), and when `s` was closed
    while opening, ends it itself (`finish`, shielded). That scope is both what a close
    cancels and the opening's time bound (`opening_scope`: one trio scope, not two, each about
    50 k instructions); an opening past it is refused `E_UNAVAILABLE {reason: no_answer}`."""
    started = trio.current_time()
    outcome = "ok"
    scope = s.opening
    assert scope is not None
    try:
        with scope:
            outcome = await open_outcome(
                s, roster, door=door, keys=keys, config=config, wall_ms=wall_ms
            )
        if scope.cancelled_caught and not s.is_closed:  # the deadline: no answer in time
            no_answer = Refusal(Code.E_UNAVAILABLE, {"reason": LocalEnd.NO_ANSWER.value})
            outcome = _refused(s, no_answer)
        elif scope.cancelled_caught:  # closed from outside (revoked, drain, uplink)
            outcome = "closed"
    finally:
        if s.state is State.OPENING:  # cancelled from outside (the pool is stopping)
            outcome = "closed"
            s.close(TunEndReason.RESTARTING.value)
        if on_open is not None:
            on_open(outcome, trio.current_time() - started)
        if s.opening is not None:  # closed while opening: this task ends it
            s.opening = None
            with trio.CancelScope(shield=True):
                await finish(s)
