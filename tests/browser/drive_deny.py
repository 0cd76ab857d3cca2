"""Press "Don't allow" on the consent page in headless Chromium, at a phone's width.

Usage: python drive_deny.py AUTHORIZE_URL REDIRECT_PREFIX
Prints one JSON line: {"final": <the URL the browser was sent to>}.
"""

from __future__ import annotations

import json
import shutil
import sys

from playwright.sync_api import sync_playwright

from tests.browser.drive_consent import ARGS


def main() -> None:
    url, redirect = sys.argv[1:3]
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=shutil.which("chromium"), args=ARGS)
        page = browser.new_page(
            viewport={"width": 360, "height": 740}, is_mobile=True, has_touch=True
        )
        page.goto(url)
        page.tap("button.no")
        page.wait_for_url(lambda u: u.startswith(redirect), timeout=30_000)
        final = page.url
        browser.close()
    print(json.dumps({"final": final}))


if __name__ == "__main__":
    main()
