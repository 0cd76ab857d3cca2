"""OAuth sign-in across a cluster of real processes: each
step of one sign-in at another instance, none of them the home's holder; a code redeemed at
two instances at once; a denial heard at the holder seen by the browser at another; and the
relay of `agent.request` to the holder refusing what is not signed right. Processes:
`conftest.cluster` (shared by the module): the home h1 dials b-1 first, so b-1 holds it.

The person's steps wait where a person would: the code is typed once its offer is in the
database (a person reads it off the box's screen), and the owner answers once the request
shows in the box's app (its console); both are polled every 50 ms within `BOUND_S`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx2
import psycopg
import pytest
import trio

from devtools.rig import console
from ftwbridge.mesh import signing
from ftwbridge.proto.claim import code_hash
from tests.oauth.helpers import authorize_params, form_fields, pkce

from .conftest import BOUND_S, Cluster, Instance
from .test_forwarding import _epoch, raw

REDIRECT = "http://127.0.0.1:9/callback"
POLL_S = 0.05
OFFER_S = 15.0
"""The longest a claim offer may take to reach the database, seconds (a bound)."""


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


def base(inst: Instance) -> str:
    return f"http://127.0.0.1:{inst.port}"


@pytest.fixture
def db(cluster: Cluster) -> Iterator[psycopg.Connection[Any]]:
    """A connection to the cluster's database, to see what a person would see on the box's
    screen (read in a worker thread)."""
    with psycopg.connect(cluster.db_url, autocommit=True) as conn:
        yield conn


Db = psycopg.Connection[Any]


async def consent_page(http: httpx2.AsyncClient, at: Instance) -> dict[str, str]:
    """Register a client and open a consent request at `at`: the form's fields, the client
    id (`client_id`) and the PKCE verifier (`v`)."""
    reg = await http.post(base(at) + "/oauth/register", json={"redirect_uris": [REDIRECT]})
    assert reg.status_code == 201, reg.text
    client_id = reg.json()["client_id"]
    verifier, challenge = pkce()
    page = await http.get(
        base(at) + "/authorize", params=authorize_params(client_id, REDIRECT, challenge)
    )
    assert page.status_code == 200, page.text
    return form_fields(page.text) | {"client_id": client_id, "v": verifier}


async def shown_code(cluster: Cluster, db: Db, home: str) -> str:
    """A claim code the home shows, once its offer is in the database (at most `OFFER_S`:
    a bridge that never writes it there is then shown the code anyway, and refuses it)."""
    code = (await console(cluster.homes[home].console, {"op": "claim"}))["code"]
    digest = code_hash(code)
    assert digest is not None
    sql = "SELECT 1 FROM oauth_state WHERE kind = 'claim' AND key = %s"
    with trio.move_on_after(OFFER_S):
        while True:
            row = await trio.to_thread.run_sync(lambda: db.execute(sql, (digest.hex(),)).fetchone())
            if row is not None:
                break
            await trio.sleep(POLL_S)
    return str(code)


async def owner_sees(cluster: Cluster, home: str, req: str) -> None:
    """Return once the assistant's request `req` shows in the box's app."""
    while True:
        waiting = await console(cluster.homes[home].console, {"op": "requests"})
        if any(r["kind"] == "assistant" and r["req"] == req for r in waiting):
            return
        await trio.sleep(POLL_S)


async def post_code(http: httpx2.AsyncClient, at: Instance, form: dict[str, str], code: str) -> str:
    """Post the consent form with the code at `at`; the waiting page's path."""
    fields = {"req": form["req"], "csrf": form["csrf"], "code": code}
    r = await http.post(base(at) + "/authorize", data=fields)
    assert r.status_code == 303, r.text
    return str(r.headers["location"])


async def wait_page(http: httpx2.AsyncClient, at: Instance, path: str) -> httpx2.Response:
    """Follow the waiting page at `at` until it redirects; that answer."""
    while True:
        r = await http.get(base(at) + path)
        if r.status_code == 303:
            return r
        assert r.status_code == 200 and 'http-equiv="refresh"' in r.text, r.text
        await trio.sleep(POLL_S)


async def exchange(
    http: httpx2.AsyncClient, at: Instance, form: dict[str, str], code: str
) -> httpx2.Response:
    data = {
        "grant_type": "authorization_code",
        "code": code,
        "client_id": form["client_id"],
        "redirect_uri": REDIRECT,
        "code_verifier": form["v"],
    }
    return await http.post(base(at) + "/oauth/token", data=data)


async def signed_in_code(
    cluster: Cluster, db: Db, http: httpx2.AsyncClient, steps: tuple[Instance, ...]
) -> tuple[dict[str, str], str]:
    """One sign-in up to the code: /authorize at steps[0], the form at steps[1], the owner
    approving at home, the waiting page at steps[2]. Returns the form and the code."""
    opened, posted, polled = steps
    form = await consent_page(http, opened)
    wait = await post_code(http, posted, form, await shown_code(cluster, db, "h1"))
    await owner_sees(cluster, "h1", form["req"])
    await console(cluster.homes["h1"].console, {"op": "approve", "req": form["req"]})
    done = await wait_page(http, polled, wait)
    query = httpx2.URL(done.headers["location"]).params
    assert done.headers["location"].startswith(REDIRECT) and query["state"] == "s1", done
    return form, str(query["code"])


async def test_each_step_of_a_sign_in_at_another_instance(cluster: Cluster, db: Db) -> None:
    """/authorize at b-2, the form at b-3, the waiting page at b-2, the token at b-3; the
    home's uplink is at b-1, which relays `agent.request` and approves."""
    b1, b2, b3 = cluster.instances.values()
    async with httpx2.AsyncClient(timeout=BOUND_S, follow_redirects=False) as http:
        with trio.fail_after(BOUND_S):
            form, code = await signed_in_code(cluster, db, http, (b2, b3, b2))
            tokens = await exchange(http, b3, form, code)
            assert tokens.status_code == 200, tokens.text
            access = tokens.json()["access_token"]
            assert tokens.json()["refresh_token"]
            for entry in (b2, b1):  # the token works, forwarded or at the holder
                r = await raw(entry.mcp, token=access)
                assert r.status_code == 200 and r.json()["result"]["tools"], r.text


async def test_a_code_redeemed_again_at_another_instance_revokes_its_tokens(
    cluster: Cluster, db: Db
) -> None:
    """Exchanged at b-2, then again at b-3: the second is a replay, refused, and it revokes
    what the first gave (RFC 6749 section 4.1.2) at every instance, refresh token included."""
    b1, b2, b3 = cluster.instances.values()
    async with httpx2.AsyncClient(timeout=BOUND_S, follow_redirects=False) as http:
        with trio.fail_after(BOUND_S):
            form, code = await signed_in_code(cluster, db, http, (b3, b2, b3))
            first = await exchange(http, b2, form, code)
            assert first.status_code == 200, first.text
            access, refresh = first.json()["access_token"], first.json()["refresh_token"]
            assert (await raw(b2.mcp, token=access)).status_code == 200
            second = await exchange(http, b3, form, code)
            assert second.status_code == 400
            assert second.json() == {
                "error": "invalid_grant",
                "error_description": "the code was already used; its tokens are revoked",
            }
            r = await raw(b1.mcp, token=access)  # b-1 never saw it: no cache, the store says
            assert r.status_code == 401, r.text
            again = await http.post(
                base(b1) + "/oauth/token",
                data={
                    "grant_type": "refresh_token",
                    "refresh_token": refresh,
                    "client_id": form["client_id"],
                },
            )
            assert again.status_code == 400, again.text  # its family went too


async def test_a_code_redeemed_at_two_instances_at_once_gives_nothing_that_works(
    cluster: Cluster, db: Db
) -> None:
    """Both exchanges at once, at b-2 and b-3: at most one gets tokens (the compare-and-set
    lets one redeem), the other is a replay; whichever order they meet in, no token it gave
    works anywhere after."""
    b1, b2, b3 = cluster.instances.values()
    async with httpx2.AsyncClient(timeout=BOUND_S, follow_redirects=False) as http:
        with trio.fail_after(BOUND_S):
            form, code = await signed_in_code(cluster, db, http, (b2, b3, b2))
            answers: list[httpx2.Response] = []

            async def one(at: Instance) -> None:
                answers.append(await exchange(http, at, form, code))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(one, b2)
                nursery.start_soon(one, b3)
            ok = [a for a in answers if a.status_code == 200]
            refused = [a for a in answers if a.status_code == 400 and "already used" in a.text]
            assert len(ok) + len(refused) == 2 and len(refused) >= 1, [a.text for a in answers]
            for a in ok:  # a replay that came after it revoked it
                r = await raw(b1.mcp, token=a.json()["access_token"])
                assert r.status_code == 401, r.text


async def test_a_denial_at_home_is_seen_at_another_instance(cluster: Cluster, db: Db) -> None:
    """The box answers `agent.denied` to b-1, its holder; the browser polls at b-3."""
    _b1, b2, b3 = cluster.instances.values()
    async with httpx2.AsyncClient(timeout=BOUND_S, follow_redirects=False) as http:
        with trio.fail_after(BOUND_S):
            form = await consent_page(http, b3)
            wait = await post_code(http, b2, form, await shown_code(cluster, db, "h1"))
            await owner_sees(cluster, "h1", form["req"])
            await console(cluster.homes["h1"].console, {"op": "deny", "req": form["req"]})
            done = await wait_page(http, b3, wait)
            query = httpx2.URL(done.headers["location"]).params
            assert query["error"] == "access_denied" and query["state"] == "s1", done.headers
            gone = await http.get(base(b2) + wait)  # the request is over everywhere
            assert gone.status_code == 400 and "unknown or has expired" in gone.text


async def test_a_claim_code_works_once_across_instances(cluster: Cluster, db: Db) -> None:
    """The code a home shows is taken by the first form that names it, at any instance; a
    second form at another instance is told it is not a code a home shows."""
    _b1, b2, b3 = cluster.instances.values()
    async with httpx2.AsyncClient(timeout=BOUND_S, follow_redirects=False) as http:
        with trio.fail_after(BOUND_S):
            first, second = await consent_page(http, b2), await consent_page(http, b3)
            code = await shown_code(cluster, db, "h1")
            await post_code(http, b2, first, code)
            fields = {"req": second["req"], "csrf": second["csrf"], "code": code}
            r = await http.post(base(b3) + "/authorize", data=fields)
            assert r.status_code == 400 and "not one a home is showing now" in r.text, r.text
            await owner_sees(cluster, "h1", first["req"])  # the first one asked its owner
            await console(cluster.homes["h1"].console, {"op": "deny", "req": first["req"]})


def _relay_body(home: str) -> bytes:
    import base64

    from ftwbridge.proto.envelope import Envelope
    from ftwbridge.proto.registry import Msg

    env = Envelope(Msg.AGENT_REQUEST, None, {"req": "x"})
    return json.dumps({"home": home, "message": base64.b64encode(env.encode()).decode()}).encode()


async def test_the_relay_refuses_what_is_not_signed_right(cluster: Cluster) -> None:
    """The internal listener's relay of `agent.request` refuses unsigned, forged, stale,
    misaddressed and replayed requests (403, in words) and a home held at another epoch
    (421), like forwarded calls."""
    from ftwbridge.mesh.relay import RELAY_PATH

    b1 = cluster.instances["b-1"]
    url = f"http://127.0.0.1:{b1.internal_port}{RELAY_PATH}"
    body = _relay_body("h1")
    now = wall_ms()

    def sign(to: str, epoch: int, *, now_ms: int, key: bytes | None = None) -> dict[str, str]:
        return signing.sign(
            key or cluster.mesh_key,
            sender="b-2",
            method="POST",
            path=RELAY_PATH,
            to=to,
            epoch=epoch,
            body=body,
            now_ms=now_ms,
        )

    async with httpx2.AsyncClient(timeout=BOUND_S) as http:
        with trio.fail_after(BOUND_S):
            epoch = await _epoch(cluster, "h1")
            good = sign("b-1", epoch, now_ms=now)
            # signed right, but not a request made at /authorize: the box ignores an
            # agent.request it cannot read; the relay only passes it on
            sent = await http.post(url, headers=good, content=body)
            assert sent.status_code == 204, sent.text
            cases: dict[str, dict[str, Any]] = {
                "unsigned": {},
                "replayed": good,
                "forged": sign("b-1", epoch, now_ms=now, key=bytes(32)),
                "stale": sign("b-1", epoch, now_ms=now - 31_000),
                "misaddressed": sign("b-3", epoch, now_ms=now),
            }
            for reason, headers in cases.items():
                refused = await http.post(url, headers=headers, content=body)
                assert refused.status_code == 403, (reason, refused.text)
                words = refused.json()["error"]
                assert words.startswith("Relayed message refused: "), words
                assert cluster.mesh_key.hex() not in refused.text
            moved = await http.post(url, headers=sign("b-1", epoch - 1, now_ms=now), content=body)
            assert moved.status_code == 421 and moved.headers.get("ftw-mesh-moved") == "1"
