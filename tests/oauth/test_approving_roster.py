"""A code exchange waits, bounded, for the roster that approved it to reach its instance.

Two instances share the sign-in's store (SQLite) and the rosters' store (in memory, so the
roster reads never leave trio). MockClock stands still while the sign-in is set up (SQLite
answers from threads, and an autojump there would end the store writes' own bounds) and jumps
once the code is exchanged, when no SQLite read has a deadline pending. The holder `h` has the
home's uplink: its door takes the box's roster listing the new agent, and the waiting page
polled there approves at once, before the holder's roster applier has saved that roster.
The code is exchanged at the other instance `x`, whose store read still finds the older roster;
the save and its `roster` event reach `x` two seconds later. The exchange must wait for them,
not refuse with "the home no longer lists this assistant"."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trio
from trio.testing import MockClock

from ftwbridge.config import Config
from ftwbridge.door import Door
from ftwbridge.keys import KeysService
from ftwbridge.mcp.auth import TokenMinter
from ftwbridge.oauth import OAuthError, OAuthService
from ftwbridge.oauth.tokens import APPROVING_ROSTER_S
from ftwbridge.proto.claim import code_hash, new_code
from ftwbridge.proto.envelope import Envelope
from ftwbridge.proto.registry import READ_SCOPES
from ftwbridge.proto.roster import AgentGrant
from ftwbridge.store import SqliteStore
from stubbox.owner import Owner
from tests.harness import MemoryStore
from tests.oauth.helpers import authorize_params, pkce

HOME = "h1"
REDIRECT = "http://127.0.0.1:9/callback"
EVENT_LATE_S = 2.0
"""How long after the exchange's first look the holder's save and `roster` event arrive (s)."""


class WatchedRosters(MemoryStore):
    """The instance `x`'s view of the rosters' store (shared with the holder's): each roster
    read sets `read`."""

    def __init__(self, shared: MemoryStore) -> None:
        super().__init__()
        self.homes, self.rosters, self.tokens = shared.homes, shared.rosters, shared.tokens
        self.read = trio.Event()

    async def roster(self, home: str) -> tuple[int, bytes] | None:
        self.read.set()
        return await super().roster(home)


@dataclass
class Instance:
    oauth: OAuthService
    door: Door


@dataclass
class Rig:
    holder: Instance
    other: Instance
    owner: Owner
    rosters: MemoryStore
    watched: WatchedRosters
    keys: KeysService


@pytest.fixture
async def rig(tmp_path: Path) -> Rig:
    now_ms = int(time.time() * 1000)
    owner = Owner(HOME, seed=HOME)
    rosters = MemoryStore()
    await rosters.enroll_home(HOME, owner.home_public_key)
    await rosters.put_roster(HOME, owner.roster.seq, owner.signed)
    watched = WatchedRosters(rosters)
    keys = KeysService(None)
    made = []
    for door_store in (rosters, watched):
        store = SqliteStore(tmp_path / "bridge.sqlite")
        await store.start()
        door = Door(config=Config(), store=door_store)  # type: ignore[arg-type]
        minter = TokenMinter(
            put=store.put_token,
            resource=lambda: "https://b/mcp",
            ttl_s=3600,
            wall_ms=lambda: now_ms,
        )
        oauth = OAuthService(
            store=store,
            keys=keys,
            door=door,
            issuer=lambda: "https://b",
            resource=lambda: "https://b/mcp",
            clock=lambda: now_ms,
            issue_access=minter.mint,
            shared=True,
        )
        made.append(Instance(oauth, door))
    return Rig(made[0], made[1], owner, rosters, watched, keys)


async def approved_code(rig: Rig) -> tuple[dict[str, str], bytes]:
    """A sign-in up to its code: opened and claimed at `x`, approved and delivered at the
    holder from the box's roster it holds in memory (not yet saved). Returns the exchange's
    form and the new roster (signed)."""
    h, x = rig.holder, rig.other
    sent: list[Envelope] = []

    async def to_box(home: str, env: Envelope) -> None:
        sent.append(env)

    x.oauth.send_to_box = to_box
    client = await x.oauth.register({"redirect_uris": [REDIRECT]}, "10.0.0.1")
    verifier, challenge = pkce()
    params = authorize_params(client["client_id"], REDIRECT, challenge)
    pending = await x.oauth.start(params | {"scope": "ftw.live.read"})
    code = new_code()
    digest = code_hash(code)
    assert digest is not None
    await h.oauth.answers.claim_offered(HOME, digest, int(time.time() * 1000) + 600_000)
    asked = await x.oauth.claim(pending.id, pending.csrf, code)
    assert asked.agent_key is not None and len(sent) == 1
    now_ms = int(time.time() * 1000)
    grant = AgentGrant(
        "agent-1", client["client_id"], "n", tuple(READ_SCOPES), (), {}, now_ms, now_ms + 10**9
    )
    signed = rig.owner.put_agent(asked.agent_key, grant, now_ms=now_ms)
    assert (await h.door.rosters.take_roster(HOME, signed))[0]  # in effect at the holder
    seen = await h.oauth.get(pending.id)  # the waiting page, polled at the holder
    assert seen is not None and seen.status == "approved"
    given = await h.oauth.deliver(seen)
    assert given is not None
    form = {
        "grant_type": "authorization_code",
        "code": given,
        "client_id": client["client_id"],
        "redirect_uri": REDIRECT,
        "code_verifier": verifier,
    }
    return form, signed


async def test_the_exchange_waits_for_the_approving_roster_and_its_late_event(
    rig: Rig, mock_clock: MockClock
) -> None:
    form, signed = await approved_code(rig)
    mock_clock.autojump_threshold = 0  # from here on, SQLite is read with no deadline pending
    rig.watched.read = trio.Event()
    answer: dict[str, Any] = {}

    async def saved_late() -> None:
        await rig.watched.read.wait()  # the exchange has looked at the store
        await trio.sleep(EVENT_LATE_S)
        await rig.rosters.put_roster(HOME, rig.owner.roster.seq, signed)  # the holder's save
        rig.other.door.forget_roster(HOME)  # its `roster` event, heard at `x`

    async def exchange() -> None:
        answer.update(await rig.other.oauth.token(form))

    began = trio.current_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(saved_late)
        nursery.start_soon(exchange)
    assert answer["token_type"] == "Bearer" and answer["scope"] == "ftw.live.read"
    assert trio.current_time() - began == pytest.approx(EVENT_LATE_S, abs=0.01)


async def test_a_roster_that_never_lists_the_agent_refuses_after_the_wait(
    rig: Rig, mock_clock: MockClock
) -> None:
    """The approving roster never reaches the store (the owner withdrew the agent at once):
    the exchange ends `invalid_grant` in words once the wait is over, not before."""
    form, _ = await approved_code(rig)
    mock_clock.autojump_threshold = 0
    began = trio.current_time()
    with pytest.raises(OAuthError) as refused:
        await rig.other.oauth.token(form)
    assert refused.value.error == "invalid_grant"
    assert refused.value.description == "the home no longer lists this assistant"
    assert trio.current_time() - began == pytest.approx(APPROVING_ROSTER_S, abs=0.01)
