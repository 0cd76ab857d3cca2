"""Refresh under concurrency (docs/auth.md, "Refresh under concurrency"): parallel refreshes of one refresh token within
the grace window get one new pair; a reuse after the window revokes the family.

Against a real bridge and stub home over real sockets. The window is measured on the bridge's
clock, which the test moves forward (no real waiting on it)."""

from __future__ import annotations

import secrets
import time
from typing import Any

import httpx2
import pytest
import trio

from ftwbridge.oauth.grace import Rotations, open_answer, seal_answer, sealing_key
from ftwbridge.store import hash_token
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


def test_a_sealed_answer_opens_only_with_the_refresh_token_it_answered() -> None:
    """What the store keeps of an answer (`grace.seal_answer`) reads as nothing without the
    used refresh token; the store itself has only that token's SHA-256."""
    parent = secrets.token_urlsafe(32)
    answer = {"access_token": "a" * 43, "token_type": "Bearer", "scope": "s", "expires_in": 9}
    answer["refresh_token"] = "r" * 43
    sealed = seal_answer(parent, answer)
    assert b"a" * 43 not in sealed and b"r" * 43 not in sealed
    assert sealed != seal_answer(parent, answer)  # a fresh nonce each time
    assert open_answer(parent, sealed) == {k: v for k, v in answer.items() if k != "expires_in"}
    assert sealing_key(parent) != hash_token(parent)  # the stored hash is not the key
    with pytest.raises(ValueError):
        open_answer(secrets.token_urlsafe(32), sealed)
    with pytest.raises(ValueError):
        open_answer(parent, sealed[:-1] + bytes([sealed[-1] ^ 1]))


async def test_refreshes_of_one_token_take_turns_at_one_instance() -> None:
    rotations = Rotations(10_000)
    assert rotations.until_ms(1_000) == 11_000
    order: list[str] = []
    first_in = trio.Event()
    release = trio.Event()

    async def first() -> None:
        async with rotations.turn(b"t"):
            order.append("first in")
            first_in.set()
            await release.wait()
            order.append("first out")

    async def repeat() -> None:
        await first_in.wait()
        async with rotations.turn(b"t"):
            order.append("repeat in")

    async def other() -> None:
        await first_in.wait()
        async with rotations.turn(b"u"):  # another token does not wait
            order.append("other in")
        release.set()

    with trio.fail_after(REAL_WAIT_S):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(first)
            nursery.start_soon(repeat)
            nursery.start_soon(other)
    assert order == ["first in", "other in", "first out", "repeat in"]
    assert len(rotations) == 0
