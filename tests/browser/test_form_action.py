"""CSP `form-action` holds for each kind of redirect URI (docs/auth.md, "Redirect URIs"), in a real Chromium.

A burned consent request (five wrong claim codes) redirects the form post straight to the
client's redirect URI; Chromium checks that redirect against the page's `form-action`. For an
https origin, a loopback host with any port, and a private-use scheme, the redirect must go out
and no CSP refusal be logged. A control run, with the client's source left out of the policy,
shows that the check would catch a refusal."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from ftwbridge.oauth import pages
from tests.browser.test_consent import assistant_listener, authorize_url, run_driver
from tests.e2e.env import Env

HERE = Path(__file__).parent
ROOT = HERE.parents[1]


async def burn(urls: list[str]) -> list[dict[str, list[str]]]:
    """What Chromium saw while burning each consent request (drive_burn.py)."""
    return await run_driver("drive_burn.py", *urls)  # type: ignore[no-any-return]


def refused(seen: dict[str, list[str]]) -> list[str]:
    return [m for m in seen["console"] if "form-action" in m]


@pytest.mark.config(trusted_proxies=("127.0.0.1",))
async def test_form_action_allows_each_kind_of_redirect(
    env: Env, nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch
) -> None:
    listener = await assistant_listener(nursery)  # http://127.0.0.1:PORT/callback
    portless = "http://127.0.0.1/callback"
    kinds = [
        (portless, listener),  # loopback: registered without a port, used with one
        ("https://app.example/cb", "https://app.example/cb"),
        ("com.example.app:/oauth2redirect", "com.example.app:/oauth2redirect"),
        ("cursor://anysphere.cursor-mcp/oauth/callback", "cursor://anysphere.cursor-mcp/oauth/callback"),
    ]  # fmt: skip
    urls = [await authorize_url(env, asked, registered) for registered, asked in kinds]
    for (_, asked), seen in zip(kinds, await burn(urls), strict=True):
        assert not refused(seen), (asked, seen)
        went = [u for u in seen["requests"] if u.startswith(asked + "?")]
        assert went and "error=access_denied" in went[-1], (asked, seen)
    # control: without the client's source in form-action, Chromium refuses the redirect
    monkeypatch.setattr(pages, "form_action_source", lambda uri: "https://elsewhere.example")
    [seen] = await burn([await authorize_url(env, listener, portless)])
    assert refused(seen), seen
    assert not [u for u in seen["requests"] if u.startswith(listener + "?")], seen
