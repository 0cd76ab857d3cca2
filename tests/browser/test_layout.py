"""The consent page for people, in a real Chromium at a phone's 360 px and a desktop's 1280 px,
light and dark: laid out at the screen's width (the viewport tag), text and touch targets big
enough (44 px at least, WCAG 2.5.5), a "Don't allow" that returns `access_denied` to the client
(RFC 6749 section 4.1.2.1), and a wrong code said right under the field, which stays focused.
Screenshots go to the test's folder (docs/images/ has the ones the docs show)."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import trio

from tests.browser.test_consent import assistant_listener, authorize_url, run_driver
from tests.e2e.env import Env

MIN_TARGET_PX = 44


async def test_the_page_fits_phones_and_desktops_light_and_dark(
    env: Env, tmp_path: Path, nursery: trio.Nursery
) -> None:
    redirect = await assistant_listener(nursery)
    await env.add_home("h1")
    url = await authorize_url(env, redirect, client_name="Kitchen assistant")
    seen = await run_driver("drive_layout.py", url, str(tmp_path))
    for key in ("360-light", "360-dark", "1280-light", "1280-dark"):
        m = seen[key]
        assert m["innerWidth"] == int(key.split("-")[0]), (key, "laid out wider than the screen")
        assert m["scrollWidth"] <= m["innerWidth"], (key, "scrolls sideways")
        assert m["fontPx"] >= 16 and m["codeFontPx"] >= 16, key  # no zoom on focus either
        for box in m["targets"]:
            assert box["h"] >= MIN_TARGET_PX and box["w"] >= MIN_TARGET_PX, (key, box)
        assert m["buttons"] == ["Ask my home", "Don't allow"], key
        assert m["code"]["autocapitalize"] == "characters", key
        assert (tmp_path / f"consent-{key}.png").stat().st_size > 1000
    assert seen["360-light"]["background"] != seen["360-dark"]["background"]
    assert seen["360-light"]["targets"][0]["w"] <= 360
    wrong = seen["wrong"]
    error, field = wrong["error"], wrong["code"]
    assert error is not None and "not one a home is showing" in error["text"]
    assert field["invalid"] == "true" and field["focused"]
    # right above the field, which is focused and scrolled into view: both on the screen
    gap = field["box"]["y"] - (error["box"]["y"] + error["box"]["h"])
    assert 0 <= gap <= 24, gap
    assert error["box"]["y"] >= 0
    assert field["box"]["y"] + field["box"]["h"] <= wrong["innerHeight"]
    # and said at the top too, linking to the field (a screen reader hears it first)
    summary = wrong["summary"]
    assert summary is not None and summary["role"] == "alert" and summary["link"] == "#code"
    assert "not one a home is showing" in summary["text"]


async def test_dont_allow_returns_access_denied(env: Env, nursery: trio.Nursery) -> None:
    redirect = await assistant_listener(nursery)
    await env.add_home("h1")
    url = await authorize_url(env, redirect)
    seen = await run_driver("drive_deny.py", url, redirect)
    query = parse_qs(urlsplit(seen["final"]).query)
    assert query["error"] == ["access_denied"] and query["state"] == ["b1"]
    assert query["iss"] == [env.bridge.site.public_url.rstrip("/")]
