"""The owner console of a stub home: JSON lines over TCP on loopback.

Each line is one command object; each answer one JSON line, `{"ok": ...}` or `{"error": ...}`.
Commands (each may name its `home`; the default is the first): `homes`,
`put_agents {agents: [put_agent fields, ...]}` (one roster for many), `put_agent {key (hex), id, client, name, scopes, ops, caps, expiresAtMs}`,
`claim` (a new home-claim code), `requests {all?}` (what waits for the owner: assistants
asking to connect, `kind: "assistant"`, and goal requests, `kind: "goal"`; `all: true` lists
decided goal requests of the last 30 days too), `approve {req, scopes?, expiresAtMs?,
readsOnly?}` (an assistant; `readsOnly` grants its read scopes and no ops), `deny {req}`,
`decide {reqId, decision: "approve" | "deny"}` (a goal request; answers its `requests`
entry), `block {by: [reason, ...]}` (the dispatch gate: commands are refused while it is not
empty), `drop_agent {key}`, `set_noise {enabled}`, `hold {on}` (stop answering tunnels),
`drop_uplink`, `clock {source?, offsetMs?, frozenMs?}`, `source {id, lagMs}` (how old that
source's last reading is; null goes back to the simulated lag), `status`. With `--state`, a change
whose state file cannot be written answers `{"error": "StateError: ..."}` and changes nothing.
"""

from __future__ import annotations

import json
from typing import Any

import trio

from ftwbridge.proto.roster import AgentGrant

from .state import StateError
from .uplink import StubHome

MAX_LINE_BYTES = 64 * 1024


class ConsoleError(Exception):
    """The console cannot start (its port is taken); the message is one sentence."""


def _grant(stub: StubHome, cmd: dict[str, Any]) -> AgentGrant:
    return AgentGrant(
        id=str(cmd["id"]),
        client=str(cmd.get("client", "")),
        name=str(cmd.get("name", "")),
        scopes=tuple(cmd.get("scopes", ())),
        ops=tuple(cmd.get("ops", ())),
        caps={str(k): int(v) for k, v in dict(cmd.get("caps", {})).items()},
        granted_at_ms=stub.wall_ms(),
        expires_at_ms=int(cmd["expiresAtMs"]),
    )


def _waiting(stub: StubHome, *, every: bool) -> list[dict[str, Any]]:
    """What waits for the owner: assistants asking to connect, then goal requests."""
    out: list[dict[str, Any]] = [
        {"kind": "assistant"} | {k: (v.hex() if isinstance(v, bytes) else v) for k, v in r.items()}
        for r in stub.requests.values()
    ]
    now = stub.wall_ms()
    entries = stub.box.goals.entries() if every else stub.box.goals.waiting(now)
    for e in entries:
        row = {"kind": "goal", "agent": e.agent, "expiresAtMs": e.expires_at_ms}
        out.append(row | e.record.to_body())
    return out


def _approval(cmd: dict[str, Any]) -> tuple[list[str] | None, int | None, bool]:
    """The owner's `approve` choices, parsed closed (docs/control.md, "Consent parses
    closed"): `scopes` a list of scope names, `expiresAtMs` an integer (ms since the epoch),
    `readsOnly` a JSON boolean, each optional. Anything else is refused in words rather than
    read as a wider grant (`"readsOnly": "true"` must not grant the ops).

    Raises:
        ValueError: a choice of another type.
    """
    scopes = cmd.get("scopes")
    if scopes is not None and not (
        isinstance(scopes, list) and all(isinstance(s, str) for s in scopes)
    ):
        raise ValueError("scopes must be a list of scope names")
    expires = cmd.get("expiresAtMs")
    if expires is not None and (not isinstance(expires, int) or isinstance(expires, bool)):
        raise ValueError("expiresAtMs must be an integer, ms since the epoch")
    reads_only = cmd.get("readsOnly", False)
    if not isinstance(reads_only, bool):
        raise ValueError("readsOnly must be true or false")
    return scopes, expires, reads_only


async def _command(stubs: dict[str, StubHome], cmd: dict[str, Any]) -> Any:
    op = cmd.get("op")
    if op == "homes":
        return sorted(stubs)
    name = cmd.get("home")
    stub = stubs[name] if name is not None else next(iter(stubs.values()))
    if op == "put_agent":
        return {"seq": await stub.put_agent(bytes.fromhex(cmd["key"]), _grant(stub, cmd))}
    if op == "put_agents":
        rows = [(bytes.fromhex(a["key"]), _grant(stub, a)) for a in cmd["agents"]]
        if not rows:
            raise ValueError("no agents")
        return {"seq": await stub.put_agents(rows)}
    if op == "claim":
        return {"code": await stub.claim()}
    if op == "requests":
        return _waiting(stub, every=cmd.get("all") is True)
    if op == "approve":
        scopes, expires, reads_only = _approval(cmd)
        seq = await stub.approve(
            str(cmd["req"]), scopes=scopes, expires_at_ms=expires, reads_only=reads_only
        )
        return {"seq": seq}
    if op == "decide":
        decision = cmd.get("decision")
        if decision not in ("approve", "deny"):
            raise ValueError('decision must be "approve" or "deny"')
        return await stub.decide(str(cmd["reqId"]), decision == "approve")
    if op == "deny":
        await stub.deny(str(cmd["req"]))
        return {}
    if op == "drop_agent":
        return {"seq": await stub.drop_agent(bytes.fromhex(cmd["key"]))}
    if op == "set_noise":
        return {"seq": await stub.set_noise(bool(cmd["enabled"]))}
    return await _box_command(stub, op, cmd)


async def _box_command(stub: StubHome, op: Any, cmd: dict[str, Any]) -> Any:
    """The box's own knobs: dispatch blocked, reads held, the uplink dropped, the clock, a
    source's lag, and its status."""
    if op == "block":
        by = cmd.get("by")
        if not isinstance(by, list) or not all(isinstance(b, str) for b in by):
            raise ValueError("by must be a list of reasons (texts)")
        stub.box.home.controls.blocked_by = list(by)
        return {"dispatchBlockedBy": by}
    if op == "hold":
        stub.hold = bool(cmd["on"])
        return {"hold": stub.hold}
    if op == "drop_uplink":
        await stub.drop_uplink()
        return {}
    if op == "clock":
        if "source" in cmd:
            stub.box.clock_source = cmd["source"]
        if "offsetMs" in cmd:
            stub.clock_offset_ms = int(cmd["offsetMs"])
            stub.goal_timer.wake()  # a request may have run out by the new clock
        if "frozenMs" in cmd:
            stub.box.frozen_ms = None if cmd["frozenMs"] is None else int(cmd["frozenMs"])
        return {"nowMs": stub.wall_ms()}
    if op == "source":
        lags, sid = stub.box.home.lag_ms, str(cmd["id"])
        if cmd.get("lagMs") is None:
            lags.pop(sid, None)
        else:
            lags[sid] = int(cmd["lagMs"])
        return {"lags": dict(lags)}
    if op == "status":
        return _status(stub)
    raise ValueError(f"unknown op {op!r}")


def _status(stub: StubHome) -> dict[str, Any]:
    """What the console's `status` shows of one home."""
    return {
        "home": stub.home,
        "connected": stub.ws is not None,
        "uplinks": stub.uplinks,
        "seq": stub.owner.roster.seq,
        "sessions": stub.box.session_count,
        "reads": stub.box.stats.reads,
        "readsBy": dict(stub.box.stats.by_read),
        "commands": stub.box.commands.stats.acted,
        "goalsWaiting": len(stub.box.goals.waiting(stub.wall_ms())),
        "refusals": stub.box.stats.refusals,
        "handshakesRefused": stub.box.stats.handshakes_refused,
        "lastRosterReply": stub.last_roster_reply,
        "nowMs": stub.wall_ms(),
    }


async def _serve_one(stubs: dict[str, StubHome], stream: trio.SocketStream) -> None:
    buf = b""
    async with stream:
        while True:
            data = await stream.receive_some(4096)
            if not data:
                return
            buf += data
            if len(buf) > MAX_LINE_BYTES:
                return
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                try:
                    answer: Any = {"ok": await _command(stubs, json.loads(line))}
                except (ValueError, KeyError, TypeError, StateError) as exc:
                    answer = {"error": refusal_words(exc)}
                await stream.send_all(json.dumps(answer).encode() + b"\n")


def refusal_words(exc: Exception) -> str:
    """One sentence for a console command that could not be carried out: a missing field is
    named, a line that is not JSON says so, and a state file that cannot be written keeps its
    `StateError:` prefix (the file is damaged or its folder gone)."""
    if isinstance(exc, json.JSONDecodeError):
        return f"the line is not a JSON object ({exc.msg} at character {exc.pos})"
    if isinstance(exc, KeyError):
        what = repr(exc.args[0]) if exc.args else "?"
        return (
            f"nothing answers to {what}: the command lacks that field, or names something this"
            " home does not have (`requests` lists what waits for the owner, `status` the rest)"
        )
    if isinstance(exc, StateError):
        return f"StateError: {exc}"
    return f"the command cannot be carried out: {exc}"


async def serve_console(
    stubs: dict[str, StubHome],
    port: int = 0,
    *,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the console of `stubs` (home id -> stub) on 127.0.0.1:`port` (0 picks one);
    reports the bound port. A command's `home` picks the stub (default: the first)."""
    try:
        listeners = await trio.open_tcp_listeners(port, host="127.0.0.1")
    except OSError as exc:
        raise ConsoleError(
            f"the console cannot listen on 127.0.0.1:{port} ({exc.strerror or exc}); pick"
            " another port with --console N, or 0 to let the system pick one"
        ) from None
    bound = listeners[0].socket.getsockname()[1]
    async with trio.open_nursery() as nursery:
        task_status.started(bound)

        async def handler(stream: trio.SocketStream) -> None:
            await _serve_one(stubs, stream)

        await trio.serve_listeners(handler, listeners, handler_nursery=nursery)
