"""Two OAuth services on one PostgreSQL, as two instances behind a round-robin balancer: the claim-code guess limit is one limit for both, and a refresh repeated at the other
instance within the grace window gets the same pair instead of revoking the family.

The services are real (`OAuthService` on `PgStore`); the door, the keys part and the access
token minter are small stand-ins, since the limits and the rotation live in the store. The
bridge's clock is a number the test moves (ms since the epoch), so no limit refills and no
window closes while the test runs."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest
import trio

from ftwbridge.oauth import OAuthError, OAuthService
from ftwbridge.oauth.model import GUESS_BURST, GUESS_SHARE_BURST, MAX_CLAIM_TRIES
from ftwbridge.proto.claim import code_hash, new_code
from ftwbridge.store import TokenRecord, hash_token
from ftwbridge.store.postgres import PgStore
from tests.oauth.helpers import authorize_params, pkce
from tests.store.pgserver import PgServer

HOME = "h1"
AGENT_KEY = b"k" * 32
REDIRECT = "http://127.0.0.1:9/cb"
RESOURCE = "https://bridge.example/mcp"
GRACE_MS = 10_000


@dataclass
class Door:
    """The door's part the OAuth service uses: claim offers, the box's link, rosters."""

    claims: dict[bytes, tuple[str, int]] = field(default_factory=dict)
    listed: bool = False

    def take_claim(self, digest: bytes, now_ms: int) -> str | None:
        home, _ = self.claims.pop(digest, (None, 0))
        return home

    async def send_to_box(self, home: str, env: Any) -> None:
        return None

    async def roster(self, home: str) -> Any:
        grant = SimpleNamespace(id="a1", scopes=("ftw.live.read",))
        return Roster({AGENT_KEY: grant} if self.listed else {})

    def forget_roster(self, home: str | None = None) -> None:
        pass

    async def wait_roster(self, home: str, accept: Any) -> Any:
        """The roster once it satisfies `accept`; no other roster comes here."""
        roster = await self.roster(home)
        if accept(roster):
            return roster
        await trio.sleep_forever()


@dataclass
class Roster:
    listed: dict[bytes, Any]

    def agents(self) -> dict[bytes, Any]:
        return self.listed


class Keys:
    async def create(self, home: str) -> bytes:
        return AGENT_KEY

    async def drop(self, key: bytes) -> None:
        return None


@dataclass
class Instance:
    oauth: OAuthService
    door: Door
    store: PgStore


@pytest.fixture
async def two(pg_server: PgServer) -> AsyncIterator[tuple[Instance, Instance, list[int]]]:
    """Two instances on one new database, and the clock they share (`now[0]`, ms)."""
    url = pg_server.create_database()
    now = [1_800_000_000_000]
    made: list[Instance] = []
    for _ in range(2):
        store = PgStore(url, connections=4)
        await store.start()
        door = Door()
        made.append(
            Instance(
                OAuthService(
                    store=store,
                    keys=Keys(),  # type: ignore[arg-type]
                    door=door,  # type: ignore[arg-type]
                    issuer=lambda: "https://bridge.example",
                    resource=lambda: RESOURCE,
                    clock=lambda: now[0],
                    issue_access=minter(store, lambda: now[0]),
                    refresh_grace_ms=GRACE_MS,
                ),
                door,
                store,
            )
        )
    try:
        yield made[0], made[1], now
    finally:
        for instance in made:
            instance.store.close()


def minter(store: PgStore, clock: Callable[[], int]) -> Any:
    """Mints an opaque access token and stores its binding, as the bridge's minter does."""

    async def issue(home: str, key: bytes, agent: str, scopes: tuple[str, ...], client: str) -> str:
        token = secrets.token_urlsafe(32)
        record = TokenRecord(home, agent, key, scopes, RESOURCE, client, clock() + 3_600_000)
        await store.put_token(hash_token(token), record)
        return token

    return issue


async def signed_in(at: Instance, now: list[int]) -> tuple[str, dict[str, Any]]:
    """A client registered and signed in at `at`: its id and the code exchange's answer."""
    client_id = (await at.oauth.register({"redirect_uris": [REDIRECT]}, "192.0.2.1"))["client_id"]
    verifier, challenge = pkce()
    pending = await at.oauth.start(authorize_params(client_id, REDIRECT, challenge), "192.0.2.1")
    code = new_code()
    digest = code_hash(code)
    assert digest is not None
    at.door.claims[digest] = (HOME, now[0] + 60_000)
    await at.oauth.claim(pending.id, pending.csrf, code, "192.0.2.1")
    at.door.listed = True
    await at.oauth.answers.on_roster(HOME, Roster({AGENT_KEY: None}))
    approved = await at.oauth.get(pending.id)
    assert approved is not None and approved.status == "approved"
    code = await at.oauth.deliver(approved)  # the waiting page's redirect
    assert code is not None
    answer = await at.oauth.token(
        {
            "grant_type": "authorization_code",
            "code": code,
            "client_id": client_id,
            "redirect_uri": REDIRECT,
            "code_verifier": verifier,
        }
    )
    return client_id, answer


async def test_the_wrong_code_limit_is_one_limit_for_both_instances(
    two: tuple[Instance, Instance, list[int]],
) -> None:
    a, b, _ = two
    client_id = (await a.oauth.register({"redirect_uris": [REDIRECT]}, "192.0.2.1"))["client_id"]
    _, challenge = pkce()
    params = authorize_params(client_id, REDIRECT, challenge)
    wrong = 0
    for n in range(GUESS_BURST // MAX_CLAIM_TRIES):  # one address per consent request
        address = f"198.51.100.{n}"
        at = (a, b)[n % 2]  # round robin, as HAProxy spreads them
        pending = await at.oauth.start(params, address)
        for i in range(MAX_CLAIM_TRIES):
            with pytest.raises(OAuthError) as info:
                await at.oauth.claim(pending.id, pending.csrf, f"AAAA-AAA{i}", address)
            assert info.value.error == "access_denied"
            wrong += 1
    assert wrong == GUESS_BURST  # each instance saw half of them
    # everyone's limit is spent at both: a new address has its share, counted once for both
    for n in range(GUESS_SHARE_BURST):
        at = (a, b)[n % 2]
        pending = await at.oauth.start(params, "203.0.113.9")
        with pytest.raises(OAuthError) as info:
            await at.oauth.claim(pending.id, pending.csrf, "AAAA-AAAA", "203.0.113.9")
        assert info.value.error == "access_denied"
    for at in (a, b):
        pending = await at.oauth.start(params, "203.0.113.9")
        with pytest.raises(OAuthError) as info:
            await at.oauth.claim(pending.id, pending.csrf, "AAAA-AAAA", "203.0.113.9")
        assert info.value.status == 429 and "too many wrong codes" in info.value.description


async def test_a_refresh_repeated_at_the_other_instance_gets_the_same_pair(
    two: tuple[Instance, Instance, list[int]],
) -> None:
    a, b, now = two
    b.door.listed = True
    client_id, first = await signed_in(a, now)
    form = {
        "grant_type": "refresh_token",
        "refresh_token": first["refresh_token"],
        "client_id": client_id,
    }
    pair = await a.oauth.token(form)
    now[0] += GRACE_MS - 1
    again = await b.oauth.token(form)  # the answer was lost; the balancer sent the retry to b
    assert (again["access_token"], again["refresh_token"]) == (
        pair["access_token"],
        pair["refresh_token"],
    )
    assert await a.store.token(hash_token(pair["access_token"])) is not None  # not revoked
    # the new refresh token works at either instance, and closes the old one's window
    newer = await b.oauth.token(form | {"refresh_token": pair["refresh_token"]})
    assert newer["refresh_token"] != pair["refresh_token"]
    with pytest.raises(OAuthError) as info:
        await a.oauth.token(form)  # within the window, but its owner holds the newer pair
    assert info.value.error == "invalid_grant" and "revoked" in info.value.description
    assert await b.store.token(hash_token(newer["access_token"])) is None


async def test_refreshes_at_both_instances_at_once_share_one_pair(
    two: tuple[Instance, Instance, list[int]],
) -> None:
    a, b, now = two
    b.door.listed = True
    client_id, first = await signed_in(a, now)
    form = {
        "grant_type": "refresh_token",
        "refresh_token": first["refresh_token"],
        "client_id": client_id,
    }
    answers: list[dict[str, Any]] = []

    async def refresh(at: Instance) -> None:
        answers.append(await at.oauth.token(form))

    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            for at in (a, b, a, b, a, b):
                nursery.start_soon(refresh, at)
    assert len({(x["access_token"], x["refresh_token"]) for x in answers}) == 1
    [access] = {x["access_token"] for x in answers}
    assert await a.store.token(hash_token(access)) is not None
    # past the window a repeat is a replay: the family and the agent's tokens go
    now[0] += GRACE_MS
    with pytest.raises(OAuthError) as info:
        await b.oauth.token(form)
    assert info.value.error == "invalid_grant" and "revoked" in info.value.description
    assert await a.store.token(hash_token(access)) is None


async def test_a_full_cluster_sheds_the_heaviest_sources_oldest_consent(
    two: tuple[Instance, Instance, list[int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("ftwbridge.oauth.service.MAX_PENDING", 3)
    first, second, now = two
    a, b = (
        Instance(
            OAuthService(
                store=at.store,
                keys=Keys(),  # type: ignore[arg-type]
                door=at.door,  # type: ignore[arg-type]
                issuer=lambda: "https://bridge.example",
                resource=lambda: RESOURCE,
                clock=lambda: now[0],
                issue_access=minter(at.store, lambda: now[0]),
                shared=True,  # the consent requests live in the store, for both
            ),
            at.door,
            at.store,
        )
        for at in (first, second)
    )
    client_id = (await a.oauth.register({"redirect_uris": [REDIRECT]}, "192.0.2.1"))["client_id"]
    _, challenge = pkce()
    params = authorize_params(client_id, REDIRECT, challenge)
    held = []
    for _ in range(3):  # one stranger fills every instance's room
        now[0] += 1
        held.append(await a.oauth.start(params, "198.51.100.7"))
    mine = await b.oauth.start(params, "203.0.113.9")  # a first request, at the other instance
    assert await a.oauth.get(held[0].id) is None  # the stranger's oldest went
    assert await a.oauth.get(held[1].id) is not None and await b.oauth.get(mine.id) is not None
    with pytest.raises(OAuthError) as info:  # the stranger holds the most: its ask is refused
        await a.oauth.start(params, "198.51.100.7")
    assert info.value.status == 429 and "from your address" in info.value.description
