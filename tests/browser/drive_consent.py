"""Drive the consent page in headless Chromium (Debian's package) with Playwright's sync API.

Usage: python drive_consent.py AUTHORIZE_URL CLAIM_CODE REDIRECT_PREFIX SCREENSHOT.png
Prints one JSON line: {"final": <the URL the browser was sent to>, "shown": <page text>}.
Run as its own process by tests/browser/test_consent.py (Playwright's sync API is not trio).
"""

from __future__ import annotations

import json
import shutil
import sys

from playwright.sync_api import sync_playwright

ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def main() -> None:
    url, code, redirect, shot = sys.argv[1:5]
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=shutil.which("chromium"), args=ARGS)
        page = browser.new_page()
        page.goto(url)
        shown = page.inner_text("body")
        page.screenshot(path=shot, full_page=True)
        page.fill("input[name=code]", code)
        page.click("button")
        page.wait_for_url(lambda u: u.startswith(redirect), timeout=30_000)
        final = page.url
        browser.close()
    print(json.dumps({"final": final, "shown": shown}))


if __name__ == "__main__":
    main()
