"""Keep the home view open in the MCP Apps test host (peers/apps_host) in headless Chromium.

Usage: python bench/drive_apps_open.py CONFIG_JSON
CONFIG: {host, mcp, token, seconds}: the host page's and the bridge's URLs, a bearer token, and
how long (s) to leave the view shown after it first rendered. Prints one JSON line: the
`tools/call`s the host made for the view by tool name, and the seconds it was open.
Run as its own process by `bench/apps_view_cost.py` (Playwright's sync API is not trio).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from playwright.sync_api import sync_playwright

from tests.browser.drive_apps_view import open_view
from tests.browser.drive_consent import ARGS


def main() -> None:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").split("\n\n")[0],
        epilog="Run by bench/apps_view_cost.py; not on its own.",
    )
    parser.add_argument("config", help="JSON: {host, mcp, token, seconds}")
    cfg = json.loads(parser.parse_args().config)
    calls: Counter[str] = Counter()

    def on_request(req: Any) -> None:
        body = req.post_data or ""
        if '"tools/call"' in body:
            calls[json.loads(body)["params"]["name"]] += 1

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=shutil.which("chromium"), args=ARGS)
        page = browser.new_page(viewport={"width": 560, "height": 900})
        page.on("request", on_request)
        start = time.monotonic()
        open_view(page, cfg, theme="light", width="520")
        opened = time.monotonic()
        time.sleep(max(0.0, cfg["seconds"] - (opened - start)))
        page.evaluate("window.__host.teardown()")
        shown_s = time.monotonic() - start
        hidden = page.evaluate("document.hidden")
        page.close()
        browser.close()
    print(json.dumps({"calls": dict(calls), "shownS": round(shown_s, 1), "hidden": hidden}))


if __name__ == "__main__":
    main()
