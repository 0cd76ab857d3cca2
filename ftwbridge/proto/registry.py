"""The contract's tables, loaded once from the YAML files packaged beside this module.

Names are the enums of `names.py` (generated from the same files); this module adds what each
name carries: a code's `retryable`, a read's scope and answers, a cap's default and ceiling, the
limits, history resolutions and signing contexts. Message types that the YAML files do not list
(PROTOCOL.md parts A to C) are defined here, once, in `Msg`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from importlib.resources import files
from typing import Any, Final

import yaml

from .names import (
    Answer,
    Cap,
    Code,
    GoalMsg,
    Read,
    Resolution,
    Scope,
    TerminateReason,
    TunEndReason,
)


class Msg(StrEnum):
    """Envelope `t` values of PROTOCOL.md parts A (upstream), B, C and E that no YAML file lists
    (`cmd`, `cmd.ack`, `cmd.result` are upstream's; E's goal messages are `names.GoalMsg`)."""

    HELLO = "hello"
    CMD = "cmd"
    CMD_ACK = "cmd.ack"
    CMD_RESULT = "cmd.result"
    HELLO_OK = "hello_ok"
    ERROR = "error"
    SESSION_TERMINATE = "session.terminate"
    DOOR_CHALLENGE = "door.challenge"
    DOOR_HELLO = "door.hello"
    ROSTER = "roster"
    ROSTER_OK = "roster.ok"
    ROSTER_REFUSED = "roster.refused"
    TUN = "tun"
    TUN_END = "tun.end"
    CLAIM_OFFER = "claim.offer"
    AGENT_REQUEST = "agent.request"
    AGENT_DENIED = "agent.denied"
    AGENT_DECIDED = GoalMsg.AGENT_DECIDED.value  # listed in agents.yaml `goal_messages`


_YAML_LOADER: Final = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's safe loader where PyYAML was built with it (the same tables, about 8 times faster:
every bridge, stub and CLI process loads the contract as it starts), else the Python one."""


def _load(name: str) -> Any:
    text = (files(__package__) / "contract" / name).read_text("utf-8")
    return yaml.load(text, Loader=_YAML_LOADER)  # a safe loader, either way


_REGISTRY: Final = _load("registry.yaml")
_AGENTS: Final = _load("agents.yaml")


@dataclass(frozen=True, slots=True)
class CodeInfo:
    """One error code: whether asking again may help, its upstream description, its arg names."""

    code: Code
    retryable: bool
    desc: str
    args: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ReadInfo:
    """One agent read (agents.yaml `reads`): request type, answer types, and the scope it needs."""

    t: Read
    answers: tuple[Answer, ...]
    scope: Scope


@dataclass(frozen=True, slots=True)
class CapInfo:
    """One grant cap (agents.yaml `caps`): value when the grant names none, and the ceiling."""

    cap: Cap
    default: int
    ceiling: int


@dataclass(frozen=True, slots=True)
class ResolutionInfo:
    """One history resolution (registry.yaml `resolutions`); spans in ms, retention in days."""

    resolution: Resolution
    tile_span_ms: int
    retention_days: int

    @property
    def step_ms(self) -> int:
        """Milliseconds between two points of this resolution (5 min or 1 h)."""
        return 300_000 if self.resolution is Resolution.R_5M else 3_600_000


def _codes() -> dict[Code, CodeInfo]:
    out: dict[Code, CodeInfo] = {}
    for row in [*_REGISTRY["errors"], *_REGISTRY["client_errors"], *_AGENTS["errors"]]:
        code = Code(row["code"])
        out[code] = CodeInfo(code, bool(row["retryable"]), row["desc"], tuple(row.get("args", ())))
    return out


def _reads() -> dict[Read, ReadInfo]:
    out: dict[Read, ReadInfo] = {}
    for row in _AGENTS["reads"]:
        ans = row["answer"] if isinstance(row["answer"], list) else [row["answer"]]
        out[Read(row["t"])] = ReadInfo(Read(row["t"]), tuple(map(Answer, ans)), Scope(row["scope"]))
    return out


CODES: Final[dict[Code, CodeInfo]] = _codes()
READS: Final[dict[Read, ReadInfo]] = _reads()
CAPS: Final[dict[Cap, CapInfo]] = {
    Cap(c["name"]): CapInfo(Cap(c["name"]), int(c["default"]), int(c["ceiling"]))
    for c in _AGENTS["caps"]
}
RESOLUTIONS: Final[dict[Resolution, ResolutionInfo]] = {
    Resolution(k): ResolutionInfo(Resolution(k), int(v["tile_span_ms"]), int(v["retention_days"]))
    for k, v in _REGISTRY["resolutions"].items()
}
LIMITS: Final[dict[str, dict[str, int]]] = {
    k: {kk: int(vv) for kk, vv in v.items()} for k, v in _AGENTS["limits"].items()
}
CONTROL_SCOPES: Final[frozenset[Scope]] = frozenset(
    Scope(s["name"]) for s in _AGENTS.get("scopes", [])
)
"""Scopes agents.yaml adds for control (PROTOCOL.md part E), e.g. `ftw.goals.write`."""
READ_SCOPES: Final[frozenset[Scope]] = frozenset(
    r.scope for r in READS.values() if r.scope not in CONTROL_SCOPES
)
"""Scopes of the plain reads: what a read-only grant holds (a control scope gates `requests.get`)."""
SCOPE_DESC: Final[dict[Scope, str]] = {
    Scope(s["name"]): s["desc"] for s in [*_REGISTRY["scopes"], *_AGENTS.get("scopes", [])]
}
GOAL_REQUEST_SCOPE: Final[Scope] = Scope(
    next(m["scope"] for m in _AGENTS["goal_messages"] if m.get("t") == GoalMsg.GOAL_REQUEST)
)
"""The scope `goal.request` needs (agents.yaml `goal_messages`): `ftw.goals.write`."""
OP_SCOPE: Final[dict[str, Scope]] = {o["name"]: Scope(o["scope"]) for o in _REGISTRY["ops"]}
ROSTER_CONTEXT: Final[bytes] = _AGENTS["roster"]["signing_context"].encode("ascii") + b"\x00"
DOOR_CONTEXT: Final[bytes] = _AGENTS["roster"]["door_context"].encode("ascii") + b"\x00"
SESSION_PROLOGUE: Final[bytes] = _AGENTS["roster"]["session_prologue"].encode("ascii")
FROZEN_FIELDS: Final[dict[int, str]] = {
    int(k): v["name"] for k, v in _REGISTRY["frozen_fields"].items()
}


_CODE_SHAPE: Final = re.compile(r"E_[A-Z0-9_]{1,48}")
_REASONS: Final = frozenset({*(r.value for r in TerminateReason), *(r.value for r in TunEndReason)})


def peer_code(code: object) -> str:
    """A code a peer sent, made safe to log, label and show: a registry code or a code of the
    registry's shape (a newer box) passes; anything else becomes `E_BAD_BODY`."""
    if isinstance(code, str) and _CODE_SHAPE.fullmatch(code):
        return code
    return Code.E_BAD_BODY.value


def peer_reason(reason: object) -> str:
    """A `session.terminate` or `tun.end` reason a peer sent: a known one, else `closed`."""
    return reason if isinstance(reason, str) and reason in _REASONS else TunEndReason.CLOSED.value


MAX_RETRY_MS: Final = 86_400_000
"""Retry hints are capped at a day: a peer cannot make the bridge promise a later time."""


def peer_ms(value: object) -> int | None:
    """A duration a peer sent, as whole ms in [0, MAX_RETRY_MS], or None when it is not one."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return min(value, MAX_RETRY_MS)


def peer_retry_ms(retry_after_ms: object, args: object = None) -> int | None:
    """A refusal's retry hint (its own `retryAfterMs`, else its args'), cleaned and capped."""
    hint = peer_ms(retry_after_ms)
    if hint is None and isinstance(args, dict):
        hint = peer_ms(args.get("retryAfterMs"))
    return hint


def retryable(code: Code) -> bool:
    """Whether asking again may succeed (registry.yaml / agents.yaml `retryable`)."""
    return CODES[code].retryable


def limit(name: str, key: str) -> int:
    """A limit of agents.yaml `limits`, e.g. `limit("history_points", "max")` -> 2000."""
    return LIMITS[name][key]
