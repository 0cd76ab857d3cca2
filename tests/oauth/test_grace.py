"""Refresh under concurrency (issue 14, item 4): parallel refreshes of one refresh token within
the grace window get one new pair; a reuse after the window revokes the family.

Against a real bridge and stub home over real sockets. The window is measured on the bridge's
clock, which the test moves forward (no real waiting on it)."""

from __future__ import annotations

import time
from typing import Any

import httpx2
import trio

from ftwbridge.oauth.grace import Rotations
from ftwbridge.oauth.model import OAuthError
from tests.e2e.env import REAL_WAIT_S, Env
from tests.oauth.test_flow import REDIRECT, mcp_status, signed_in


async def parallel(http: httpx2.AsyncClient, url: str, form: dict[str, str], n: int) -> list[Any]:
    """`n` copies of one token request sent at once; their (status, JSON) in any order."""
    out: list[Any] = []

    async def one() -> None:
        r = await http.post(url, data=form)
        out.append((r.status_code, r.json()))

    with trio.fail_after(REAL_WAIT_S):
        async with trio.open_nursery() as nursery:
            for _ in range(n):
                nursery.start_soon(one)
    return out


async def test_parallel_refreshes_share_one_pair_then_reuse_after_the_window_revokes(
    env: Env,
) -> None:
    home = await env.add_home("h1", "--approve-all")
    offset = [0]
    env.bridge.oauth._clock = lambda: time.time_ns() // 1_000_000 + offset[0]
    async with httpx2.AsyncClient(timeout=REAL_WAIT_S) as http:
        client_id, verifier, code, token_url = await signed_in(env, home, http)
        first = await http.post(
            token_url,
            data={
                "grant_type": "authorization_code",
                "code": code,
                "client_id": client_id,
                "redirect_uri": REDIRECT,
                "code_verifier": verifier,
            },
        )
        tokens = first.json()
        for n in (3, 20):
            form = {
                "grant_type": "refresh_token",
                "refresh_token": tokens["refresh_token"],
                "client_id": client_id,
            }
            answers = await parallel(http, token_url, form, n)
            assert [status for status, _ in answers] == [200] * n, answers
            pairs = {(a["access_token"], a["refresh_token"]) for _, a in answers}
            assert len(pairs) == 1  # everyone got the same new pair
            [(access, refresh)] = pairs
            assert refresh != tokens["refresh_token"]
            assert await mcp_status(http, env, access) == 400  # it works (bad body, authorized)
            old, tokens = tokens, answers[0][1]
        # past the window (10 s by default) a reuse of a rotated-out token revokes the family
        offset[0] += env.bridge.config.refresh_grace_ms + 1
        reuse = await http.post(token_url, data=form)
        assert reuse.status_code == 400 and reuse.json()["error"] == "invalid_grant"
        assert "revoked" in reuse.json()["error_description"]
        assert await mcp_status(http, env, tokens["access_token"]) == 401
        form["refresh_token"] = tokens["refresh_token"]
        assert (await http.post(token_url, data=form)).status_code == 400
        assert old["refresh_token"] != tokens["refresh_token"]


async def test_rotations_window_child_and_family_without_io() -> None:
    """The grace window's bookkeeping alone (`grace.Rotations`), on explicit ms."""
    rotations = Rotations(10_000)
    first = rotations.begin(b"old", 1_000)
    rotations.name_family(b"old", "fam")
    assert rotations.get(b"old", 10_999) is first and rotations.get(b"old", 11_000) is None
    first.succeed({"access_token": "a", "refresh_token": "n"}, b"new")
    assert await first.outcome() == {"access_token": "a", "refresh_token": "n"}
    rotations.begin(b"new", 2_000)  # the new token is used: the old one's window closes
    assert rotations.get(b"old", 2_000) is None and len(rotations) == 1
    rotations.name_family(b"new", "fam")
    rotations.drop_family("fam")
    assert len(rotations) == 0
    failed = rotations.begin(b"x", 3_000)
    failed.fail(OAuthError("invalid_grant", "no"))
    try:
        await failed.outcome()
    except OAuthError as exc:
        assert exc.error == "invalid_grant"
    else:
        raise AssertionError("a repeat of a failed refresh must fail the same way")
    rotations.purge(13_000)
    assert len(rotations) == 0
    strict = Rotations(0)
    strict.begin(b"y", 0)
    assert strict.get(b"y", 0) is None and len(strict) == 0  # 0: every repeat is a reuse
