"""Signed rosters: build, sign, verify, and admit agents (PROTOCOL.md part B).

SignedRoster = CBOR `{"body": bstr, "sig": bstr}`, `sig` = Ed25519 over `"ftw.roster.v1" 0x00 ||
body` with the home's key; `body` is deterministic CBOR (RFC 8949 section 4.2.1, keys sorted).
`verify_roster` refuses a roster whole, with a `RosterProblem`, for any rule of part B;
`admit` decides one agent key against a verified roster at a given time (ms since the epoch).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from nacl.exceptions import BadSignatureError, CryptoError
from nacl.signing import SigningKey, VerifyKey

from .envelope import dumps, loads
from .errors import RemoteProtocolError
from .names import Cap, Code, Role
from .refusal import Refusal
from .registry import CAPS, ROSTER_CONTEXT

ROSTER_VERSION = 1
KEY_BYTES = 32


class RosterProblem(StrEnum):
    """Why a roster was refused; sent as `code` in `roster.refused` (our choice, docs/protocol.md)."""

    MALFORMED = "malformed"
    BAD_SIGNATURE = "bad_signature"
    OTHER_HOME = "other_home"
    UNKNOWN_VERSION = "unknown_version"
    STALE_SEQ = "stale_seq"
    BAD_AGENT_ROW = "bad_agent_row"


class RosterRefused(RemoteProtocolError):
    """A roster broke a rule of PROTOCOL.md part B; `problem` says which."""

    def __init__(self, problem: RosterProblem, message: str) -> None:
        super().__init__(message)
        self.problem = problem


@dataclass(frozen=True, slots=True)
class AgentGrant:
    """An agent row's grant; times in ms since the Unix epoch; `caps` kept whole, unknown ones too."""

    id: str
    client: str
    name: str
    scopes: tuple[str, ...]
    ops: tuple[str, ...]
    caps: dict[str, int] = field(hash=False)
    granted_at_ms: int
    expires_at_ms: int

    def cap(self, cap: Cap) -> int:
        """The grant's value for `cap` (a count, or seconds, or days, as the cap's name says):
        the value the roster names, the cap's default when it names none, never above the
        cap's ceiling (PROTOCOL.md part B "Caps"; `contract/agents.yaml` `caps`). The one
        place a cap's value is worked out, for the bridge and the stub box alike."""
        info = CAPS[cap]
        return min(self.caps.get(cap.value, info.default), info.ceiling)

    def to_cbor(self) -> dict[str, Any]:
        """The grant as its roster map (contract key names)."""
        return {
            "id": self.id,
            "client": self.client,
            "name": self.name,
            "scopes": list(self.scopes),
            "ops": list(self.ops),
            "caps": dict(self.caps),
            "grantedAtMs": self.granted_at_ms,
            "expiresAtMs": self.expires_at_ms,
        }


@dataclass(frozen=True, slots=True)
class Device:
    """One roster row: a 32-byte key, a role, whether it may open tunnels, and an agent grant."""

    key: bytes
    role: str
    tun: bool
    copy: tuple[str, ...] = ()
    agent: AgentGrant | None = None

    def to_cbor(self) -> dict[str, Any]:
        """The row as its roster map."""
        row: dict[str, Any] = {"key": self.key, "role": self.role, "tun": self.tun}
        row["copy"] = list(self.copy)
        if self.agent is not None:
            row["agent"] = self.agent.to_cbor()
        return row


@dataclass(frozen=True, slots=True)
class Roster:
    """A verified roster body. `signed` holds the SignedRoster bytes exactly as received."""

    home: str
    seq: int
    issued_at_ms: int
    noise: bytes | None
    devices: tuple[Device, ...]
    signed: bytes = b""

    def device(self, key: bytes) -> Device | None:
        """The row for `key` (32 bytes), or None."""
        for dev in self.devices:
            if dev.key == key:
                return dev
        return None

    def agents(self) -> dict[bytes, AgentGrant]:
        """Agent key -> grant, for every agent row."""
        return {d.key: d.agent for d in self.devices if d.agent is not None}

    def body_cbor(self) -> dict[str, Any]:
        """The body as its contract map."""
        body: dict[str, Any] = {
            "v": ROSTER_VERSION,
            "home": self.home,
            "seq": self.seq,
            "issuedAtMs": self.issued_at_ms,
            "devices": [d.to_cbor() for d in self.devices],
        }
        if self.noise is not None:
            body["noise"] = self.noise
        return body


def sign_roster(roster: Roster, home_key: SigningKey) -> bytes:
    """Sign `roster` with the home's Ed25519 key; returns SignedRoster CBOR bytes."""
    body = dumps(roster.body_cbor(), canonical=True)
    sig = home_key.sign(ROSTER_CONTEXT + body).signature
    return dumps({"body": body, "sig": sig}, canonical=True)


def _uint(v: Any, what: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise RosterRefused(RosterProblem.MALFORMED, f"{what} is not an unsigned integer")
    return v


def _text(v: Any, what: str) -> str:
    if not isinstance(v, str):
        raise RosterRefused(RosterProblem.MALFORMED, f"{what} is not text")
    return v


def _texts(v: Any, what: str) -> tuple[str, ...]:
    if not isinstance(v, list):
        raise RosterRefused(RosterProblem.MALFORMED, f"{what} is not a list")
    return tuple(_text(x, what) for x in v)


def _grant(g: Any) -> AgentGrant:
    if not isinstance(g, dict):
        raise RosterRefused(RosterProblem.MALFORMED, "agent grant is not a map")
    caps = g.get("caps", {})
    if not isinstance(caps, dict):
        raise RosterRefused(RosterProblem.MALFORMED, "caps is not a map")
    return AgentGrant(
        id=_text(g.get("id"), "agent.id"),
        client=_text(g.get("client"), "agent.client"),
        name=_text(g.get("name"), "agent.name"),
        scopes=_texts(g.get("scopes"), "agent.scopes"),
        ops=_texts(g.get("ops"), "agent.ops"),
        caps={_text(k, "cap name"): _uint(v, "cap value") for k, v in caps.items()},
        granted_at_ms=_uint(g.get("grantedAtMs"), "grantedAtMs"),
        expires_at_ms=_uint(g.get("expiresAtMs"), "expiresAtMs"),
    )


def _device(d: Any) -> Device:
    if not isinstance(d, dict):
        raise RosterRefused(RosterProblem.MALFORMED, "device is not a map")
    key = d.get("key")
    if not isinstance(key, bytes) or len(key) != KEY_BYTES:
        raise RosterRefused(RosterProblem.MALFORMED, "device key is not 32 bytes")
    role = _text(d.get("role"), "role")
    if role not in set(Role):
        raise RosterRefused(RosterProblem.MALFORMED, "unknown role")
    tun = d.get("tun")
    if not isinstance(tun, bool):
        raise RosterRefused(RosterProblem.MALFORMED, "tun is not a bool")
    copy = _texts(d.get("copy", []), "copy")
    agent = None if d.get("agent") is None else _grant(d["agent"])
    if (agent is not None or role == Role.AGENT) and (
        agent is None or role != Role.AGENT or tun or copy
    ):
        raise RosterRefused(
            RosterProblem.BAD_AGENT_ROW,
            "an agent row must have role agent, tun false, empty copy and a grant",
        )
    return Device(key, role, tun, copy, agent)


def verify_roster(
    signed: bytes, *, home_key: bytes, home: str, held_seq: int | None = None
) -> Roster:
    """Verify SignedRoster bytes for `home` against its Ed25519 key (32 bytes).

    `held_seq` is the seq of the roster the caller holds; the new one must be greater.

    Raises:
        RosterRefused: with the `RosterProblem` of the first rule broken (PROTOCOL.md part B).
    """
    try:
        outer = loads(signed)
    except RemoteProtocolError as exc:
        raise RosterRefused(RosterProblem.MALFORMED, str(exc)) from exc
    if not isinstance(outer, dict):
        raise RosterRefused(RosterProblem.MALFORMED, "signed roster is not a map")
    body, sig = outer.get("body"), outer.get("sig")
    if not isinstance(body, bytes) or not isinstance(sig, bytes):
        raise RosterRefused(RosterProblem.MALFORMED, "signed roster needs bytes body and sig")
    try:
        VerifyKey(home_key).verify(ROSTER_CONTEXT + body, sig)
    except (BadSignatureError, CryptoError, ValueError, TypeError) as exc:
        raise RosterRefused(RosterProblem.BAD_SIGNATURE, "roster signature fails") from exc
    try:
        b = loads(body)
    except RemoteProtocolError as exc:
        raise RosterRefused(RosterProblem.MALFORMED, str(exc)) from exc
    if not isinstance(b, dict):
        raise RosterRefused(RosterProblem.MALFORMED, "roster body is not a map")
    if b.get("v") != ROSTER_VERSION:
        raise RosterRefused(RosterProblem.UNKNOWN_VERSION, "unknown roster version")
    if _text(b.get("home"), "home") != home:
        raise RosterRefused(RosterProblem.OTHER_HOME, "roster is for another home")
    seq = _uint(b.get("seq"), "seq")
    if held_seq is not None and seq <= held_seq:
        raise RosterRefused(RosterProblem.STALE_SEQ, "roster seq is not newer than the held one")
    noise = b.get("noise")
    if noise is not None and (not isinstance(noise, bytes) or len(noise) != KEY_BYTES):
        raise RosterRefused(RosterProblem.MALFORMED, "noise key is not 32 bytes")
    devices = b.get("devices")
    if not isinstance(devices, list):
        raise RosterRefused(RosterProblem.MALFORMED, "devices is not a list")
    rows = tuple(_device(d) for d in devices)
    if len({d.key for d in rows}) != len(rows):
        raise RosterRefused(RosterProblem.MALFORMED, "a device key is listed twice")
    return Roster(home, seq, _uint(b.get("issuedAtMs"), "issuedAtMs"), noise, rows, signed)


@dataclass(frozen=True, slots=True)
class Admitted:
    """The agent may open a session: its grant and the box's Noise key (32 bytes)."""

    grant: AgentGrant
    box_noise_key: bytes


def admit(roster: Roster, agent_key: bytes, now_ms: int) -> Admitted | Refusal:
    """Decide whether `agent_key` may open a session at `now_ms` (ms since the epoch).

    Rules (PROTOCOL.md part B): the key's row must be an agent row (a phone's row is never an
    agent) -> else `E_GRANT_REVOKED`; `now_ms` must be before `expiresAtMs` -> else
    `E_GRANT_EXPIRED {expiresAtMs}`; the roster must name the box's `noise` key -> else
    `E_UNAVAILABLE {subsystem: "assistants"}`.
    """
    dev = roster.device(agent_key)
    if dev is None or dev.agent is None or dev.role != Role.AGENT:
        return Refusal(Code.E_GRANT_REVOKED)
    if now_ms >= dev.agent.expires_at_ms:
        return Refusal(Code.E_GRANT_EXPIRED, {"expiresAtMs": dev.agent.expires_at_ms})
    if roster.noise is None:
        return Refusal(Code.E_UNAVAILABLE, {"subsystem": "assistants"})
    return Admitted(dev.agent, roster.noise)
