"""CSP `form-action` holds for each kind of redirect URI (issue 14, item 2), in a real Chromium.

A burned consent request (five wrong claim codes) redirects the form post straight to the
client's redirect URI; Chromium checks that redirect against the page's `form-action`. For an
https origin, a loopback host with any port, and a private-use scheme, the redirect must go out
and no CSP refusal be logged. A control run, with the client's source left out of the policy,
shows that the check would catch a refusal."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import httpx2
import pytest
import trio

from ftwbridge.oauth import pages
from tests.browser.test_consent import assistant_listener
from tests.e2e.env import REAL_WAIT_S, Env
from tests.oauth.test_flow import pkce

HERE = Path(__file__).parent
ROOT = HERE.parents[1]


async def authorize_url(env: Env, registered: str, asked: str) -> str:
    base = env.bridge.site.public_url
    async with httpx2.AsyncClient(timeout=REAL_WAIT_S) as http:
        reg = await http.post(base + "/oauth/register", json={"redirect_uris": [registered]})
    assert reg.status_code == 201, reg.text
    _, challenge = pkce()
    params = {
        "response_type": "code",
        "client_id": reg.json()["client_id"],
        "redirect_uri": asked,
        "code_challenge": challenge,
        "code_challenge_method": "S256",
        "state": "fa",
    }
    return str(httpx2.URL(base + "/authorize", params=params))


async def burn(urls: list[str]) -> list[dict[str, list[str]]]:
    """What Chromium saw while burning each consent request (drive_burn.py)."""
    with trio.fail_after(180):
        done = await trio.run_process(
            [sys.executable, str(HERE / "drive_burn.py"), *urls],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            cwd=ROOT,
            env=os.environ | {"PYTHONPATH": str(ROOT)},
        )
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    return json.loads(done.stdout.decode().strip().splitlines()[-1])  # type: ignore[no-any-return]


def refused(seen: dict[str, list[str]]) -> list[str]:
    return [m for m in seen["console"] if "form-action" in m]


@pytest.mark.config(trusted_proxies=("127.0.0.1",))
async def test_form_action_allows_each_kind_of_redirect(
    env: Env, nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch
) -> None:
    if shutil.which("chromium") is None:
        pytest.fail("Debian's chromium is not installed: make test installs it (make browser)")
    listener = await assistant_listener(nursery)  # http://127.0.0.1:PORT/callback
    portless = "http://127.0.0.1/callback"
    kinds = [
        (portless, listener),  # loopback: registered without a port, used with one
        ("https://app.example/cb", "https://app.example/cb"),
        ("com.example.app:/oauth2redirect", "com.example.app:/oauth2redirect"),
        ("cursor://anysphere.cursor-mcp/oauth/callback", "cursor://anysphere.cursor-mcp/oauth/callback"),
    ]  # fmt: skip
    urls = [await authorize_url(env, registered, asked) for registered, asked in kinds]
    for (_, asked), seen in zip(kinds, await burn(urls), strict=True):
        assert not refused(seen), (asked, seen)
        went = [u for u in seen["requests"] if u.startswith(asked + "?")]
        assert went and "error=access_denied" in went[-1], (asked, seen)
    # control: without the client's source in form-action, Chromium refuses the redirect
    monkeypatch.setattr(pages, "form_action_source", lambda uri: "https://elsewhere.example")
    [seen] = await burn([await authorize_url(env, portless, listener)])
    assert refused(seen), seen
    assert not [u for u in seen["requests"] if u.startswith(listener + "?")], seen
