"""Burn a consent request in headless Chromium: five wrong claim codes, so the last form post
is redirected straight to the client's redirect URI with `error=access_denied`. That redirect is
what CSP `form-action` governs (Chromium checks it on redirects after a form post).

Usage: python drive_burn.py AUTHORIZE_URL...
Prints one JSON line: a list with, for each URL in turn, {"requests": [URLs the page asked
for], "console": [console messages], "url": <where the page ended>}. One browser serves them
all, a fresh page each, from its own client address (`X-Forwarded-For` 192.0.2.N: the bridge
under test trusts 127.0.0.1 as a proxy, so the per-address guess limit counts each page apart).
Run as its own process by test_form_action.py.
"""

from __future__ import annotations

import json
import shutil
import sys
from typing import Any

from playwright.sync_api import Browser, Error, sync_playwright

from tests.browser.drive_consent import ARGS


def burn(browser: Browser, url: str, address: str) -> dict[str, Any]:
    requests: list[str] = []
    console: list[str] = []
    page = browser.new_page()
    page.set_extra_http_headers({"x-forwarded-for": address})  # a person each, as via a proxy
    page.on("console", lambda m: console.append(m.text))
    page.on("request", lambda r: requests.append(r.url))
    page.goto(url)
    for i in range(5):
        page.fill("input[name=code]", f"AAAA-AAA{i}")
        try:
            with page.expect_navigation(timeout=15_000):
                page.click("button")
        except Error as exc:  # a navigation to an app's scheme or an unreachable host
            console.append(f"navigation: {exc.message.splitlines()[0]}")
    page.wait_for_timeout(300)  # let a refused navigation's console message arrive
    final = page.url
    page.close()
    return {"requests": requests, "console": console, "url": final}


def main() -> None:
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=shutil.which("chromium"), args=ARGS)
        seen = [burn(browser, url, f"192.0.2.{i}") for i, url in enumerate(sys.argv[1:], 1)]
        browser.close()
    print(json.dumps(seen))


if __name__ == "__main__":
    main()
