"""Drive a browser-based assistant in headless Chromium (Debian's package) with Playwright.

Usage: python drive_browser_client.py APP_URL MCP_URL CLAIM_CODE
Opens the assistant's page (another loopback origin than the bridge's), which runs the official
TypeScript client's OAuth flow; on the bridge's consent page types the home's claim code; then
waits for the page's outcome. Prints one JSON line: {"result": <the page's outcome>,
"console": [browser console errors]}. Run as its own process by test_browser_client.py.
"""

from __future__ import annotations

import json
import shutil
import sys

from playwright.sync_api import sync_playwright

from tests.browser.drive_consent import ARGS


def main() -> None:
    app, mcp, code = sys.argv[1:4]
    errors: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=shutil.which("chromium"), args=ARGS)
        page = browser.new_page()
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.goto(f"{app}/?mcp={mcp}")
        try:
            page.wait_for_url(lambda u: "/authorize?" in u, timeout=30_000)
            page.fill("input[name=code]", code)
            page.click("button")
            page.wait_for_url(lambda u: u.startswith(app + "/callback"), timeout=30_000)
            page.wait_for_function("window.__result !== undefined", timeout=30_000)
            result = json.loads(page.evaluate("window.__result"))
        except Exception as exc:  # report what the page saw, not only the timeout
            late = page.evaluate("window.__result ?? null")
            result = {"ok": False, "error": f"{type(exc).__name__}: {exc}", "page": late}
            result["url"] = page.url
        browser.close()
    print(json.dumps({"result": result, "console": errors}))


if __name__ == "__main__":
    main()
