"""Signed rosters: every refusal of PROTOCOL.md part B, one by one, and admission."""

from __future__ import annotations

import dataclasses

import pytest
from nacl.signing import SigningKey

from ftwbridge.proto.envelope import dumps, loads
from ftwbridge.proto.names import Cap, Code, Role
from ftwbridge.proto.refusal import Refusal
from ftwbridge.proto.registry import CAPS, ROSTER_CONTEXT
from ftwbridge.proto.roster import (
    Admitted,
    AgentGrant,
    Device,
    Roster,
    RosterProblem,
    RosterRefused,
    admit,
    sign_roster,
    verify_roster,
)

HOME = "home-1"
KEY = SigningKey(b"\x01" * 32)
PUB = bytes(KEY.verify_key)
AGENT = b"\xaa" * 32
PHONE = b"\xbb" * 32
NOISE = b"\xcc" * 32
GRANT = AgentGrant("ag1", "client-1", "Assistant", ("ftw.live.read",), (), {}, 1000, 5000)


def roster(**kw: object) -> Roster:
    base = Roster(
        home=HOME,
        seq=2,
        issued_at_ms=1000,
        noise=NOISE,
        devices=(
            Device(PHONE, Role.OWNER, True, ("ftw.live.read",)),
            Device(AGENT, Role.AGENT, False, (), GRANT),
        ),
    )
    return dataclasses.replace(base, **kw)  # type: ignore[arg-type]


def verify(signed: bytes, **kw: object) -> Roster:
    args: dict[str, object] = {"home_key": PUB, "home": HOME, "held_seq": 1} | kw
    return verify_roster(signed, **args)  # type: ignore[arg-type]


def refusal(signed: bytes, **kw: object) -> RosterProblem:
    with pytest.raises(RosterRefused) as info:
        verify(signed, **kw)
    return info.value.problem


def resign(body: dict[str, object], key: SigningKey = KEY) -> bytes:
    raw = dumps(body, canonical=True)
    return dumps({"body": raw, "sig": key.sign(ROSTER_CONTEXT + raw).signature})


def test_roundtrip_and_admit() -> None:
    r = verify(sign_roster(roster(), KEY))
    assert r.seq == 2 and r.noise == NOISE and r.agents() == {AGENT: GRANT}
    assert admit(r, AGENT, 4999) == Admitted(GRANT, NOISE)


def test_admit_refusals() -> None:
    r = verify(sign_roster(roster(), KEY))
    assert admit(r, AGENT, 5000) == Refusal(Code.E_GRANT_EXPIRED, {"expiresAtMs": 5000})
    assert admit(r, PHONE, 2000) == Refusal(Code.E_GRANT_REVOKED, {})  # a phone is never an agent
    assert admit(r, b"\x00" * 32, 2000) == Refusal(Code.E_GRANT_REVOKED, {})
    no_noise = verify(sign_roster(roster(noise=None), KEY))
    assert admit(no_noise, AGENT, 2000) == Refusal(Code.E_UNAVAILABLE, {"subsystem": "assistants"})


def test_bad_signature_and_other_homes_key() -> None:
    signed = sign_roster(roster(), KEY)
    outer = loads(signed)
    outer["sig"] = bytes([outer["sig"][0] ^ 1]) + outer["sig"][1:]
    assert refusal(dumps(outer)) is RosterProblem.BAD_SIGNATURE
    other = SigningKey(b"\x02" * 32)
    assert refusal(sign_roster(roster(), other)) is RosterProblem.BAD_SIGNATURE


def test_other_home_version_and_replay() -> None:
    assert refusal(sign_roster(roster(home="home-2"), KEY)) is RosterProblem.OTHER_HOME
    body = roster().body_cbor() | {"v": 2}
    assert refusal(resign(body)) is RosterProblem.UNKNOWN_VERSION
    signed = sign_roster(roster(), KEY)
    assert refusal(signed, held_seq=2) is RosterProblem.STALE_SEQ  # replayed
    assert refusal(signed, held_seq=3) is RosterProblem.STALE_SEQ  # rolled back


@pytest.mark.parametrize(
    "row",
    [
        Device(AGENT, Role.AGENT, True, (), GRANT),  # tun: true
        Device(AGENT, Role.AGENT, False, ("ftw.live.read",), GRANT),  # non-empty copy
        Device(AGENT, Role.VIEWER, False, (), GRANT),  # another role
        Device(AGENT, Role.AGENT, False, (), None),  # agent role without a grant
    ],
)
def test_bad_agent_rows_refuse_the_whole_roster(row: Device) -> None:
    assert refusal(sign_roster(roster(devices=(row,)), KEY)) is RosterProblem.BAD_AGENT_ROW


def test_malformed() -> None:
    assert refusal(b"\xff") is RosterProblem.MALFORMED
    assert refusal(dumps([1, 2])) is RosterProblem.MALFORMED
    twice = roster(devices=(Device(PHONE, Role.OWNER, True), Device(PHONE, Role.VIEWER, True)))
    assert refusal(sign_roster(twice, KEY)) is RosterProblem.MALFORMED
    body = roster().body_cbor() | {"noise": b"short"}
    assert refusal(resign(body)) is RosterProblem.MALFORMED


@pytest.mark.parametrize("cap", list(Cap))
def test_a_grants_cap_is_its_value_else_the_default_never_past_the_ceiling(cap: Cap) -> None:
    """`AgentGrant.cap` is the one place a cap's value is worked out (bridge and stub box)."""
    info = CAPS[cap]
    assert GRANT.cap(cap) == info.default
    named = dataclasses.replace(GRANT, caps={cap.value: 0, "future_cap": 7})
    assert named.cap(cap) == 0  # a cap the owner set to nothing is nothing, not the default
    over = dataclasses.replace(GRANT, caps={cap.value: info.ceiling + 1})
    assert over.cap(cap) == info.ceiling
