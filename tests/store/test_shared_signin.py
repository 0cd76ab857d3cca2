"""The sign-in's store-side steps with the store as the truth (`OAuthService(shared=True)`):
two services on one database play two instances, once on SQLite and once on PostgreSQL
(`open_same`). The holder `a` has the home's uplink (its door hears the box); `b` is any other
instance. The door here is a small stand-in that records what would go to the box; the whole
flow over real processes is tests/cluster/test_signin.py."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
import trio

from ftwbridge.keys import KeysService
from ftwbridge.keys.service import KeysError
from ftwbridge.mcp.auth import TokenMinter
from ftwbridge.oauth import OAuthError, OAuthService
from ftwbridge.proto.claim import code_hash, new_code
from ftwbridge.proto.envelope import Envelope
from ftwbridge.proto.roster import AgentGrant
from ftwbridge.store import BridgeStore, StoreError
from tests.oauth.helpers import authorize_params, pkce
from tests.store.conftest import OpenSame

REDIRECT = "http://127.0.0.1:9/callback"
SCOPES = ("ftw.live.read",)


@dataclass
class Roster:
    """What the service reads of a roster: its seq and agents."""

    seq: int
    listed: dict[bytes, AgentGrant]

    def agents(self) -> dict[bytes, AgentGrant]:
        return self.listed


@dataclass
class Door:
    """The door's side the service uses: what was sent to the box, the roster, the claims."""

    sent: list[tuple[str, Envelope]] = field(default_factory=list)
    roster_held: Roster | None = None
    claims: dict[bytes, tuple[str, int]] = field(default_factory=dict)

    async def send_to_box(self, home: str, env: Envelope) -> None:
        self.sent.append((home, env))

    async def roster(self, home: str) -> Roster | None:
        return self.roster_held

    def forget_roster(self, home: str | None = None) -> None:
        pass

    async def wait_roster(self, home: str, accept: Any) -> Roster:
        """The held roster once it satisfies `accept`; no other roster comes here."""
        if self.roster_held is not None and accept(self.roster_held):
            return self.roster_held
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    def take_claim(self, digest: bytes, now_ms: int) -> str | None:
        raise AssertionError("shared: claims are taken from the store")


@dataclass
class Instance:
    oauth: OAuthService
    door: Door
    store: BridgeStore


Two = tuple[Instance, Instance, KeysService, list[int]]


@pytest.fixture
async def two(open_same: OpenSame) -> Two:
    """Instances `a` and `b` on one database, one keys part, and the clock (`now[0]`, ms)."""
    now = [1_800_000_000_000]
    keys = KeysService(None)
    made = []
    for _ in range(2):
        store = open_same()
        await store.start()
        door = Door()
        minter = TokenMinter(
            put=store.put_token,
            resource=lambda: "https://b/mcp",
            ttl_s=3600,
            wall_ms=lambda: now[0],
        )
        oauth = OAuthService(
            store=store,
            keys=keys,
            door=door,  # type: ignore[arg-type]
            issuer=lambda: "https://b",
            resource=lambda: "https://b/mcp",
            clock=lambda: now[0],
            issue_access=minter.mint,
            shared=True,
        )
        made.append(Instance(oauth, door, store))
    return made[0], made[1], keys, now


async def offered(holder: Instance, home: str, now: list[int]) -> str:
    """The holder's door heard `claim.offer` for a new code; returns the code."""
    code = new_code()
    digest = code_hash(code)
    listener = holder.oauth.answers.claim_listener  # what the holder's door is given
    assert digest is not None and listener is not None
    await listener(home, digest, now[0] + 600_000)
    return code


async def opened(at: Instance, keys: KeysService) -> tuple[Any, str, str]:
    """A registered client and a consent request opened at `at`: (request, client, verifier)."""
    client = await at.oauth.register({"redirect_uris": [REDIRECT]}, "10.0.0.1")
    verifier, challenge = pkce()
    params = authorize_params(client["client_id"], REDIRECT, challenge) | {
        "scope": " ".join(SCOPES)
    }
    return await at.oauth.start(params), client["client_id"], verifier


async def test_each_step_at_either_instance(two: Two) -> None:
    a, b, keys, now = two
    pending, client_id, verifier = await opened(b, keys)
    assert b.oauth._pending == {} and a.oauth._pending == {}  # nothing kept in memory
    code = await offered(a, "h1", now)
    asked = await b.oauth.claim(pending.id, pending.csrf, code)
    assert asked.status == "asked" and asked.home == "h1" and asked.agent_key is not None
    assert [(h, e.b["req"]) for h, e in b.door.sent] == [("h1", pending.id)]
    seen = await a.oauth.get(pending.id)  # the holder finds it in the store
    assert seen is not None and (seen.status, seen.agent_key) == ("asked", asked.agent_key)
    # the box's roster lists the agent; once saved at the holder, the request is approved
    grant = AgentGrant("agent-1", client_id, "n", SCOPES, (), {}, now[0], now[0] + 10**9)
    roster = Roster(2, {asked.agent_key: grant})
    await a.oauth.answers.on_roster_saved("h2", roster)  # type: ignore[arg-type]  # another home's roster: nothing
    assert (await b.oauth.get(pending.id)).status == "asked"  # type: ignore[union-attr]
    await a.oauth.answers.on_roster_saved("h1", roster)  # type: ignore[arg-type]
    approved = await b.oauth.get(pending.id)
    assert approved is not None and approved.status == "approved"
    code_text = await b.oauth.deliver(approved)
    assert code_text is not None
    assert await a.oauth.deliver(approved) is None  # delivered once, wherever polled
    assert await a.oauth.get(pending.id) is None
    a.door.roster_held = b.door.roster_held = roster
    form = {
        "grant_type": "authorization_code",
        "code": code_text,
        "client_id": client_id,
        "redirect_uri": REDIRECT,
        "code_verifier": verifier,
    }
    tokens = await a.oauth.token(form)
    assert tokens["scope"] == "ftw.live.read" and tokens["refresh_token"]
    with pytest.raises(OAuthError) as replay:
        await b.oauth.token(form)
    assert replay.value.error == "invalid_grant" and "already used" in replay.value.description
    from ftwbridge.store import hash_token

    assert await a.store.token(hash_token(tokens["access_token"])) is None  # revoked


async def test_a_poll_that_finds_the_agent_listed_approves(two: Two) -> None:
    """The holder's approval was lost (its database write failed): the instance the browser
    polls sees the roster listing the new agent and approves the request itself."""
    a, b, keys, now = two
    pending, client_id, _ = await opened(b, keys)
    asked = await b.oauth.claim(pending.id, pending.csrf, await offered(a, "h1", now))
    assert asked.agent_key is not None
    grant = AgentGrant("agent-1", client_id, "n", SCOPES, (), {}, now[0], now[0] + 10**9)
    b.door.roster_held = Roster(2, {b"x" * 32: grant})  # another agent: still asked
    assert (await b.oauth.get(pending.id)).status == "asked"  # type: ignore[union-attr]
    b.door.roster_held = Roster(3, {asked.agent_key: grant})
    seen = await b.oauth.get(pending.id)
    assert seen is not None and seen.status == "approved"
    assert (await a.oauth.get(pending.id)).status == "approved"  # type: ignore[union-attr]


async def test_a_wrong_code_counts_and_a_claim_is_used_once(two: Two) -> None:
    a, b, keys, now = two
    first, _, _ = await opened(a, keys)
    second, _, _ = await opened(b, keys)
    code = await offered(a, "h1", now)
    with pytest.raises(OAuthError) as wrong:
        await b.oauth.claim(first.id, first.csrf, "AAAA-AAAA")
    assert wrong.value.error == "access_denied"
    assert (await a.oauth.get(first.id)).tries == 1  # type: ignore[union-attr]
    await b.oauth.claim(first.id, first.csrf, code)
    with pytest.raises(OAuthError) as used:
        await a.oauth.claim(second.id, second.csrf, code)
    assert "not one a home is showing" in used.value.description


async def test_one_open_offer_per_home_and_expired_offers_fail(two: Two) -> None:
    a, b, keys, now = two
    old = await offered(a, "h1", now)
    new = await offered(a, "h1", now)  # the home shows a new code: the old one goes
    p, _, _ = await opened(b, keys)
    with pytest.raises(OAuthError):
        await b.oauth.claim(p.id, p.csrf, old)
    later = await offered(a, "h2", now)
    now[0] += 600_000  # both codes ran out
    q, _, _ = await opened(b, keys)
    for code in (new, later):
        with pytest.raises(OAuthError):
            await b.oauth.claim(q.id, q.csrf, code)


async def test_a_denial_heard_at_the_holder_is_in_the_store(two: Two) -> None:
    a, b, keys, now = two
    p, _, _ = await opened(b, keys)
    await b.oauth.claim(p.id, p.csrf, await offered(a, "h1", now))
    await a.oauth.answers.agent_denied("h2", p.id)  # another home's box cannot deny it
    assert (await b.oauth.get(p.id)).status == "asked"  # type: ignore[union-attr]
    await a.oauth.answers.agent_denied("h1", p.id)
    denied = await b.oauth.get(p.id)
    assert denied is not None and denied.status == "denied"
    assert denied.agent_key is not None and await keys.has(denied.agent_key)
    await b.oauth.forget(denied)
    assert not await keys.has(denied.agent_key) and await a.oauth.get(p.id) is None


async def test_an_expired_request_drops_its_key_once(two: Two) -> None:
    a, b, keys, now = two
    p, _, _ = await opened(b, keys)
    asked = await b.oauth.claim(p.id, p.csrf, await offered(a, "h1", now))
    assert asked.agent_key is not None and await keys.has(asked.agent_key)
    now[0] = p.expires_at_ms
    assert await a.oauth.get(p.id) is None
    await opened(a, keys)  # a new sign-in sweeps what expired
    assert not await keys.has(asked.agent_key)


async def test_open_consent_requests_are_bounded_for_the_cluster(
    two: Two, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bound on open consent requests (`MAX_PENDING`) holds when the store is the truth:
    a stranger with many addresses cannot grow `oauth_state` without end, and cannot keep a
    first request out either (docs/auth.md, "Limits that strangers cannot fill"): when the
    bound is full, a new address's request gets in and an older one of the heaviest goes."""
    a, b, _, now = two
    monkeypatch.setattr("ftwbridge.oauth.service.MAX_PENDING", 3)
    client = await a.oauth.register({"redirect_uris": [REDIRECT]}, "10.0.0.1")
    _, challenge = pkce()
    params = authorize_params(client["client_id"], REDIRECT, challenge)
    opened_, fresh = [], []
    for n in range(3):  # a stranger's three addresses fill the room, one request each
        now[0] += 1
        opened_.append(await (a, b)[n % 2].oauth.start(params, f"198.51.100.{n}"))
    for n, at in enumerate((a, b)):  # two people's first requests, one at each instance
        now[0] += 1
        fresh.append(await at.oauth.start(params, f"203.0.113.{n}"))
    alive = [p for p in (*opened_, *fresh) if await a.oauth.get(p.id) is not None]
    assert len(alive) == 3  # the bound holds for the cluster
    assert all(p in alive for p in fresh)  # and neither first request was refused


class _Outage:
    """A store whose database stops answering as the consent request is marked asked (the
    write that names the new agent's key); everything else reaches the real store."""

    def __init__(self, store: BridgeStore) -> None:
        self._store = store

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def change_oauth_state(self, kind: str, key: str, changes: Any, *a: Any, **k: Any) -> Any:
        if "agent_key" in changes:
            raise StoreError("the database does not answer (a test's outage)")
        return await self._store.change_oauth_state(kind, key, changes, *a, **k)


async def test_an_outage_as_the_request_is_asked_leaves_no_agent_key(two: Two) -> None:
    """The database stops answering after the keys part made the agent's key and before the
    request names it: the person is told in words (StoreError, the edge's 503), and the key,
    which no record names and no roster will list, is dropped, not kept forever."""
    a, b, _, now = two
    made: list[bytes] = []

    class Keys(KeysService):
        async def create(self, home: str) -> bytes:
            made.append(await super().create(home))
            return made[-1]

    keys = Keys(None)
    failing = OAuthService(
        store=_Outage(b.store),  # type: ignore[arg-type]
        keys=keys,
        door=b.door,  # type: ignore[arg-type]
        issuer=lambda: "https://b",
        resource=lambda: "https://b/mcp",
        clock=lambda: now[0],
        issue_access=lambda *_: None,  # type: ignore[arg-type,return-value]
        shared=True,
    )
    pending, _, _ = await opened(Instance(failing, b.door, b.store), keys)
    with pytest.raises(StoreError):
        await failing.claim(pending.id, pending.csrf, await offered(a, "h1", now))
    assert len(made) == 1 and not await keys.has(made[0])
    assert b.door.sent == []  # the box was asked nothing


async def test_a_keys_part_that_does_not_answer_is_words_not_a_500(
    two: Two, caplog: pytest.LogCaptureFixture
) -> None:
    """The keys part is down as the person types the code: they read that the key service does
    not answer (503, temporarily_unavailable), not the bare 500 of an uncaught `KeysError`. A
    key that cannot be dropped as a request ends is logged; the sign-in goes on."""
    a, b, _, now = two

    class Down(KeysService):
        async def create(self, home: str) -> bytes:
            raise KeysError("the keys part does not answer (a test's outage)")

        async def drop(self, key: bytes) -> None:
            raise KeysError("the keys part does not answer (a test's outage)")

    def service(keys: KeysService) -> OAuthService:
        return OAuthService(
            store=b.store,
            keys=keys,
            door=b.door,  # type: ignore[arg-type]
            issuer=lambda: "https://b",
            resource=lambda: "https://b/mcp",
            clock=lambda: now[0],
            issue_access=lambda *_: None,  # type: ignore[arg-type,return-value]
            shared=True,
        )

    down = service(Down(None))
    pending, _, _ = await opened(Instance(down, b.door, b.store), Down(None))
    with pytest.raises(OAuthError) as refused:
        await down.claim(pending.id, pending.csrf, await offered(a, "h1", now))
    assert refused.value.status == 503 and "key service does not answer" in str(
        refused.value.description
    )
    up = KeysService(None)
    asked = await service(up).claim(pending.id, pending.csrf, await offered(a, "h1", now))
    assert asked.agent_key is not None
    with caplog.at_level("WARNING", logger="ftwbridge.oauth"):
        await down.forget(asked)  # its key cannot be dropped now: logged, not raised
    assert "was not dropped" in caplog.text
