"""One agent command through the pool (PROTOCOL.md part E): the bridge's side of `cmd`.

`send_command(pool, home, agent_key, op, args, cmd_id=..., new_cmd_id=...)` holds the agent's
session for the whole command, so nothing else goes to the box between its steps:

1. `cmds_per_hour` is checked at the bridge before a byte leaves (`CommandBudget`, the grant's
   cap, default 20, ceiling 120): past it, `E_RATE_LIMITED {retryAfterMs}`; a cap of 0 is
   `E_CAP_EXCEEDED {cap: cmds_per_hour, max: 0, asked: 1}`, as at the box. As at the box, it
   counts commands the box carried out (acked, or `applied` / `unconfirmed`), and a release
   (`clear`) is neither limited nor counted: an assistant can always stop what it started;
2. a session that has seen no `controlRev` reads `loadpoints.get` first (part E);
3. `cmd` goes out on lane 0 with `expect.rev` and `notValidAfterMs` (proto/session.py); the
   session stays BUSY through `cmd.ack` until `cmd.result`. The caller's deadline bounds the
   wait: `RESULT_MARGIN_S` before it, a command the box acked is `unconfirmed` (upstream: the
   box accepted it, the charger has not confirmed; the hold is running), one it did not ack
   is `E_UNAVAILABLE {reason: timeout}`. An acked command whose result is unreadable or never
   comes because the session dropped is `unconfirmed` too (`UNTOLD`); the session the box left hanging is closed by the
   pool's deadline heap (its box hears `tun.end`);
4. on `E_CONFLICT` (as an `error`, or a rejected `cmd.result`) it reads `loadpoints.get` again
   and tries once more under a new `cmdId` (a box that kept the conflict in its idempotency
   table would answer the old one with it again; the stub box keeps no retryable refusal,
   upstream does not say). The pool remembers the new id
   (`Renames`): a retry of the same call that was already waiting for the session goes under
   it, so the box answers it from its table instead of acting a second time on the first id,
   which it did not keep (a retryable refusal).
"""

from __future__ import annotations

import math
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, Final

import trio

from ftwbridge.proto.control import CmdAck, CmdResult, CmdState
from ftwbridge.proto.names import Cap, Code, Read
from ftwbridge.proto.refusal import Refusal
from ftwbridge.proto.session import AgentSession

from .homes import SessionHolder
from .session import session_clock_ms

HOUR_S: Final = 3600.0
UNTOLD: Final = frozenset({Code.E_UNAVAILABLE, Code.E_BAD_BODY})
"""Refusals that, after a `cmd.ack`, only mean the result never came readable (no result in
time, one for another `cmdId` or malformed, the session dropped): the box acted, so the
command is `unconfirmed` (upstream), not refused. A revocation or an expired grant stays a
refusal: the box ends that agent's holds."""
RESULT_MARGIN_S: Final = 1.0
"""How long before the caller's deadline a command stops waiting for its `cmd.result`, so
that what the box did (acked or not) is still told, seconds."""
MAX_RENAMES: Final = 10_000
"""Agents whose latest `cmdId` change is remembered at most (`Renames`)."""
ACTED: Final = frozenset({CmdState.APPLIED, CmdState.UNCONFIRMED})
"""`cmd.result` states of a command the box carried out (what `cmds_per_hour` counts)."""


@dataclass(frozen=True, slots=True)
class CommandOutcome:
    """What the box did with a command: the `cmdId` it went under (a new one after a retry on
    `E_CONFLICT`), its `cmd.ack` if the box acted, and its `cmd.result`."""

    cmd_id: str
    ack: CmdAck | None
    result: CmdResult


class CommandBudget:
    """`cmds_per_hour` at the bridge: the commands of each agent the box carried out in the
    rolling hour.

    Times are trio seconds passed in; no I/O. A `cmdId` sent again (a retry the box answers
    from its idempotency table) is not counted twice. An agent whose last command left the
    hour is forgotten (the least recently charged go first), so the table holds only agents
    that commanded within the hour.
    """

    def __init__(self) -> None:
        self._sent: OrderedDict[tuple[str, bytes], deque[tuple[float, str]]] = OrderedDict()

    def retry_after_ms(self, key: tuple[str, bytes], cap: int, now_s: float) -> int | None:
        """None when one more command fits in the rolling hour, else the ms until one does."""
        sent = self._sent.get(key)
        if sent is None:
            return None
        while sent and sent[0][0] <= now_s - HOUR_S:
            sent.popleft()
        if not sent:
            del self._sent[key]
            return None
        if len(sent) < cap:
            return None
        return max(1, math.ceil((sent[0][0] + HOUR_S - now_s) * 1000))

    def charge(self, key: tuple[str, bytes], cmd_id: str, now_s: float) -> None:
        """Count `cmd_id` as sent at `now_s` (once)."""
        sent = self._sent.setdefault(key, deque())
        if all(c != cmd_id for _at, c in sent):
            sent.append((now_s, cmd_id))
        self._sent.move_to_end(key)
        while self._sent:
            oldest = next(iter(self._sent.values()))
            if oldest and oldest[-1][0] > now_s - HOUR_S:
                break
            self._sent.popitem(last=False)

    def __len__(self) -> int:
        """Agents with a command in the table."""
        return len(self._sent)


class Renames:
    """The `cmdId` each agent's command went under instead of the one it was given (a retry
    after `E_CONFLICT`), so that a retry of the same call sent before it was known goes
    under the new id too (PROTOCOL.md part E: a client's retry acts once).

    Only each agent's latest change is kept, at most `MAX_RENAMES` agents (least recent
    forgotten first): a retry waits for the agent's one session, so it is always the next
    command after the one that changed. No I/O.
    """

    def __init__(self) -> None:
        self._latest: OrderedDict[tuple[str, bytes], tuple[str, str]] = OrderedDict()

    def note(self, key: tuple[str, bytes], old: str, new: str) -> None:
        """Agent `key`'s command given `old` went under `new`."""
        self._latest[key] = (old, new)
        self._latest.move_to_end(key)
        while len(self._latest) > MAX_RENAMES:
            self._latest.popitem(last=False)

    def resolve(self, key: tuple[str, bytes], cmd_id: str) -> str:
        """The id to send agent `key`'s command given `cmd_id` under."""
        held = self._latest.get(key)
        return held[1] if held is not None and held[0] == cmd_id else cmd_id


def _start(op: str, args: dict[str, Any], cmd_id: str, agent: AgentSession) -> tuple[int, bytes]:
    return agent.command(op, args, cmd_id=cmd_id, now_ms=session_clock_ms())


def _conflict(reply_or_refusal: CmdResult | Refusal) -> bool:
    if isinstance(reply_or_refusal, Refusal):
        return reply_or_refusal.code == Code.E_CONFLICT
    error = reply_or_refusal.error
    return (
        reply_or_refusal.state is CmdState.REJECTED
        and error is not None
        and error.code == Code.E_CONFLICT
    )


async def send_command(
    pool: SessionHolder,
    home: str,
    agent_key: bytes,
    op: str,
    args: dict[str, Any],
    *,
    cmd_id: str,
    new_cmd_id: Callable[[], str],
    budget: CommandBudget,
    renames: Renames,
) -> CommandOutcome:
    """Send command `op` with `args` as agent `agent_key` at `home` (the module's steps).

    Raises:
        Refusal: the roster, the queue, `cmds_per_hour`, the box's `error` (other than one
            conflict), or the session ending. A `cmd.result` that is not `applied` is
            returned, not raised: the caller says what it means.
    """
    key = (home, agent_key)
    counted = "clear" not in args  # a release is never limited: an assistant can always stop
    async with pool.hold(home, agent_key, command=True) as (s, grant):
        cap = grant.cap(Cap.CMDS_PER_HOUR)
        if counted and cap == 0:  # the owner allows none: waiting would not help
            raise Refusal(
                Code.E_CAP_EXCEEDED, {"cap": Cap.CMDS_PER_HOUR.value, "max": 0, "asked": 1}
            )
        wait_ms = budget.retry_after_ms(key, cap, trio.current_time()) if counted else None
        if wait_ms is not None:
            raise Refusal(Code.E_RATE_LIMITED, {"retryAfterMs": wait_ms}, wait_ms)
        assert s.agent is not None
        cmd_id = renames.resolve(key, cmd_id)  # a retry that waited while the first went again
        if s.agent.control_rev is None:
            await pool.exchange(s, lambda agent: agent.request(Read.LOADPOINTS_GET.value))
        for attempt in (1, 2):
            ack: list[CmdAck] = []
            outcome: CmdResult | Refusal
            try:
                outcome = Refusal(Code.E_UNAVAILABLE, {"reason": "timeout"})  # unless answered
                with trio.move_on_at(trio.current_effective_deadline() - RESULT_MARGIN_S):
                    reply = await pool.exchange(s, partial(_start, op, args, cmd_id), acks=ack)
                    assert isinstance(reply.body, CmdResult)
                    outcome = reply.body
            except Refusal as exc:
                outcome = exc
            if isinstance(outcome, Refusal) and ack and outcome.code in UNTOLD:
                outcome = CmdResult(cmd_id, CmdState.UNCONFIRMED)  # the box acted: say so
            if attempt == 1 and _conflict(outcome):
                await pool.exchange(s, lambda agent: agent.request(Read.LOADPOINTS_GET.value))
                cmd_id, old = new_cmd_id(), cmd_id
                renames.note(key, old, cmd_id)
                continue
            if isinstance(outcome, Refusal):
                raise outcome
            if counted and (ack or outcome.state in ACTED):
                budget.charge(key, cmd_id, trio.current_time())
            return CommandOutcome(cmd_id, ack[0] if ack else None, outcome)
    raise AssertionError("unreachable")  # pragma: no cover
