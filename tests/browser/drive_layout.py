"""Measure the consent page as a person sees it, in headless Chromium (Debian's package).

Usage: python drive_layout.py AUTHORIZE_URL SHOTS_DIR
For each of 360 x 740 and 1280 x 800, light and dark, it opens the page, measures it and
writes `consent-<width>-<scheme>.png` into SHOTS_DIR; then, at 360 light, it types a wrong code
and measures where the error shows (`consent-wrong-code-360.png`). Prints one JSON line.
Run as its own process by tests/browser/test_layout.py (Playwright's sync API is not trio).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

from playwright.sync_api import Page, sync_playwright

from tests.browser.drive_consent import ARGS

SIZES = ((360, 740), (1280, 800))
MEASURE = """() => {
  const box = (el) => { const r = el.getBoundingClientRect();
    return {x: r.x, y: r.y, w: r.width, h: r.height}; };
  const code = document.querySelector('input[name=code]');
  const error = document.querySelector('#code-error');
  const summary = document.querySelector('.summary');
  return {
    scrollWidth: document.documentElement.scrollWidth,
    innerWidth: window.innerWidth, innerHeight: window.innerHeight,
    fontPx: parseFloat(getComputedStyle(document.body).fontSize),
    codeFontPx: parseFloat(getComputedStyle(code).fontSize),
    targets: [code, ...document.querySelectorAll('button')].map(box),
    buttons: [...document.querySelectorAll('button')].map((b) => b.innerText),
    background: getComputedStyle(document.body).backgroundColor,
    color: getComputedStyle(document.body).color,
    code: {box: box(code), autocapitalize: code.getAttribute('autocapitalize'),
           invalid: code.getAttribute('aria-invalid'), focused: document.activeElement === code},
    error: error ? {box: box(error), text: error.innerText} : null,
    summary: summary ? {box: box(summary), text: summary.innerText,
                        link: summary.querySelector('a').getAttribute('href'),
                        role: summary.getAttribute('role')} : null,
  };
}"""


def measure(page: Page) -> dict[str, Any]:
    return page.evaluate(MEASURE)  # type: ignore[no-any-return]


def main() -> None:
    url, shots = sys.argv[1], Path(sys.argv[2])
    out: dict[str, Any] = {}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=shutil.which("chromium"), args=ARGS)
        for width, height in SIZES:
            for scheme in ("light", "dark"):
                page = browser.new_page(
                    viewport={"width": width, "height": height},
                    color_scheme=scheme,
                    device_scale_factor=1,
                    is_mobile=width < 500,
                    has_touch=width < 500,
                )
                page.goto(url)
                out[f"{width}-{scheme}"] = measure(page)
                page.screenshot(path=str(shots / f"consent-{width}-{scheme}.png"), full_page=True)
                page.close()
        page = browser.new_page(
            viewport={"width": 360, "height": 740}, is_mobile=True, has_touch=True
        )
        page.goto(url)
        page.fill("input[name=code]", "ZZZZ-ZZZZ")
        page.click("button.yes")
        page.wait_for_selector("#code-error")
        out["wrong"] = measure(page)
        page.screenshot(path=str(shots / "consent-wrong-code-360.png"), full_page=True)
        browser.close()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
