"""Every step of a sign-in leaves one audit line and one metric sample (docs/operations.md,
"Audit log"): registration, consent started, claim code wrong and right, approved or denied
at home, code exchanged, refresh, revocation."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import httpx2
import pytest
import trio

from ftwbridge.oauth.audit import safe
from ftwbridge.oauth.model import ConsentStatus, Pending
from tests.e2e.env import REAL_WAIT_S, Env
from tests.oauth.helpers import authorize_params, form_fields, pkce
from tests.oauth.test_flow import REDIRECT, signed_in


def _lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "ftwbridge.audit" and r.getMessage().startswith("signin=")
    ]


def _metric(env: Env, step: str, outcome: str) -> float:
    value = env.bridge.metrics.registry.get_sample_value(
        "ftwbridge_signin_steps_total", {"step": step, "outcome": outcome}
    )
    return value or 0.0


def test_audit_fields_are_one_word_each() -> None:
    assert safe("a b\nstatus=ok") == "a_b_status=ok" and safe("") == "-"
    assert len(safe("x" * 200)) == 80


async def test_each_step_of_a_sign_in_is_audited_and_counted(
    env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger="ftwbridge.audit")
    home = await env.add_home("h1", "--approve-all")
    base = env.bridge.site.public_url
    async with httpx2.AsyncClient(timeout=REAL_WAIT_S, follow_redirects=False) as http:
        # a wrong claim code first
        reg = await http.post(base + "/oauth/register", json={"redirect_uris": [REDIRECT]})
        _, challenge = pkce()
        params = authorize_params(reg.json()["client_id"], REDIRECT, challenge)
        form = form_fields((await http.get(base + "/authorize", params=params)).text)
        await http.post(base + "/authorize", data=form | {"code": "AAAA-AAAA"})
        # then a whole sign-in, its tokens refreshed and revoked
        client_id, verifier, code, token_url = await signed_in(env, home, http)
        r = await http.post(
            token_url,
            data={
                "grant_type": "authorization_code",
                "code": code,
                "client_id": client_id,
                "code_verifier": verifier,
                "redirect_uri": REDIRECT,
                "resource": env.url,
            },
        )
        assert r.status_code == 200, r.text
        refresh = r.json()["refresh_token"]
        r = await http.post(
            token_url,
            data={"grant_type": "refresh_token", "refresh_token": refresh, "client_id": client_id},
        )
        assert r.status_code == 200, r.text
        r = await http.post(base + "/oauth/revoke", data={"token": r.json()["refresh_token"]})
        assert r.status_code == 200
        await http.post(base + "/oauth/revoke", data={"token": "never-issued"})
        await http.post(token_url, data={"grant_type": "authorization_code", "code": code})
    lines = _lines(caplog)
    steps = [line.split()[:2] for line in lines]
    for seen in (
        ["signin=register", "status=ok"],
        ["signin=consent", "status=ok"],
        ["signin=claim", "status=wrong_code"],
        ["signin=claim", "status=asked"],
        ["signin=home", "status=approved"],
        ["signin=exchange", "status=ok"],
        ["signin=refresh", "status=ok"],
        ["signin=revoke", "status=ok"],
        ["signin=revoke", "status=unknown"],
        ["signin=exchange", "status=invalid_request"],
    ):
        assert seen in steps, (seen, lines)
    approved = next(line for line in lines if line.startswith("signin=home"))
    assert f"client={client_id}" in approved and "home=h1" in approved
    assert code not in "\n".join(lines) and refresh not in "\n".join(lines)
    assert _metric(env, "claim", "wrong_code") == 1 and _metric(env, "home", "approved") == 1
    assert _metric(env, "register", "ok") == 2 and _metric(env, "revoke", "unknown") == 1


async def test_a_denial_at_home_is_audited(env: Env, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO", logger="ftwbridge.audit")
    home = await env.add_home("h1")
    base = env.bridge.site.public_url
    async with httpx2.AsyncClient(timeout=REAL_WAIT_S, follow_redirects=False) as http:
        reg = await http.post(base + "/oauth/register", json={"redirect_uris": [REDIRECT]})
        _, challenge = pkce()
        params = authorize_params(reg.json()["client_id"], REDIRECT, challenge)
        form = form_fields((await http.get(base + "/authorize", params=params)).text)
        code = (await home.console(op="claim"))["code"]
        r = await http.post(base + "/authorize", data=form | {"code": code})
        assert r.status_code == 303
        with trio.fail_after(REAL_WAIT_S):
            while True:  # agent.request crosses real sockets to the box
                if requests := await home.console(op="requests"):
                    break
                await trio.sleep(0.05)
            await home.console(op="deny", req=requests[0]["req"])
            while True:
                r = await http.get(base + f"/authorize/wait?req={form['req']}")
                if r.status_code == 303:
                    break
                await trio.sleep(0.05)
    assert any(line.startswith("signin=home status=denied") for line in _lines(caplog))
    assert _metric(env, "home", "denied") == 1


async def test_a_right_code_is_audited_asked_when_the_home_answers_first(
    env: Env, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The box may approve before the claim's audit line is written (a box that approves at
    once, over a fast door): the claim step still says what it did, `asked`."""
    caplog.set_level("INFO", logger="ftwbridge.audit")
    home = await env.add_home("h1")
    oauth = env.bridge.oauth
    claim = oauth.claim

    async def answered_first(*args: Any) -> Pending:
        asked = await claim(*args)
        return replace(asked, status=ConsentStatus.APPROVED)  # the owner's answer came first

    monkeypatch.setattr(oauth, "claim", answered_first)
    base = env.bridge.site.public_url
    async with httpx2.AsyncClient(timeout=REAL_WAIT_S, follow_redirects=False) as http:
        reg = await http.post(base + "/oauth/register", json={"redirect_uris": [REDIRECT]})
        _, challenge = pkce()
        params = authorize_params(reg.json()["client_id"], REDIRECT, challenge)
        form = form_fields((await http.get(base + "/authorize", params=params)).text)
        code = (await home.console(op="claim"))["code"]
        r = await http.post(base + "/authorize", data=form | {"code": code})
        assert r.status_code == 303
    steps = [line.split()[:2] for line in _lines(caplog)]
    assert ["signin=claim", "status=asked"] in steps, steps
    assert _metric(env, "claim", "asked") == 1
