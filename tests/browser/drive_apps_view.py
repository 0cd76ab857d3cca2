"""Drive the MCP Apps test host (peers/apps_host) in headless Chromium with Playwright's sync API.

Usage: python drive_apps_view.py CONFIG_JSON
CONFIG: {host, mcp, token, console, home, first, second, secondMs, energy, shots}: the host page's
and the bridge's URLs, a bearer token, the stub home's console port and name, the `status` fields
the stub answers at its frozen time and at `secondMs`, the last period of `energy_report {period:
day, count: 1}` at the frozen time (or null: the driver does not wait for it), and a folder for
screenshots.
Prints one JSON line of what it saw; test_apps_view.py asserts on it. Run as its own process.
"""

from __future__ import annotations

import json
import shutil
import socket
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import Frame, Page, sync_playwright

from tests.browser.drive_consent import ARGS

WAIT_MS = 60_000
FIELDS = ("grid_w", "pv_w", "battery_w", "ev_w", "load_w")


def console(port: int, command: dict[str, Any]) -> Any:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(json.dumps(command).encode() + b"\n")
        buf = b""
        while not buf.endswith(b"\n"):
            buf += s.recv(65536)
    return json.loads(buf)


def open_view(page: Page, cfg: dict[str, Any], **query: str) -> Frame:
    params = {"mcp": cfg["mcp"], "token": cfg["token"], "tz": "Europe/Stockholm"} | query
    page.goto(cfg["host"] + "/?" + urlencode(params))
    page.wait_for_function("window.__host && (window.__host.ready || window.__host.errors.length)")
    errors = page.evaluate("window.__host.errors")
    if errors:
        raise RuntimeError(f"host: {errors}")
    frame = next(f for f in page.frames if f is not page.main_frame)
    try:
        poll(
            frame,
            "!!(window.__view && window.__view.liveOk && window.__view.plan"
            " && window.__view.chargers && window.__view.energy)",
        )
    except TimeoutError:
        got = "['liveOk', 'plan', 'chargers', 'energy'].filter(k => !window.__view[k])"
        say = "[note, energy].map(e => e.textContent)"
        raise TimeoutError(f"missing {frame.evaluate(got)}: {frame.evaluate(say)}") from None
    return frame


def poll(frame: Frame, expression: str) -> None:
    """Wait until `expression` is true in `frame` (Playwright's own wait_for_function would
    evaluate a string inside the view, which its CSP refuses: no 'unsafe-eval')."""
    end = time.monotonic() + WAIT_MS / 1000
    while not _true(frame, expression):
        if time.monotonic() > end:
            raise TimeoutError(expression)
        time.sleep(0.2)


def settled(page: Page, frame: Frame) -> None:
    """Wait until the host has sized the iframe to the view (`ui/notifications/size-changed`
    of its last render), so a screenshot shows all of it."""
    end = time.monotonic() + WAIT_MS / 1000
    inner = "Math.ceil(document.documentElement.getBoundingClientRect().height)"
    outer = "Math.ceil(document.querySelector('iframe').getBoundingClientRect().height)"
    while page.evaluate(outer) < frame.evaluate(inner) and time.monotonic() < end:
        time.sleep(0.2)


def _true(frame: Frame, expression: str) -> bool:
    """`expression` in `frame`, False while the frame is still navigating to the view's srcdoc
    (the host sets it once its bridge is connected)."""
    try:
        return bool(frame.evaluate(expression))
    except PlaywrightError as exc:
        if "Execution context was destroyed" in str(exc):
            return False
        raise


def shown(frame: Frame) -> dict[str, str]:
    return frame.evaluate(  # type: ignore[no-any-return]
        "Object.fromEntries([...document.querySelectorAll('[data-field]')]"
        ".map(e => [e.dataset.field, e.textContent]))"
    )


def expected(frame: Frame, fields: dict[str, int]) -> dict[str, str]:
    """The texts the view's own formatter gives the stub's numbers."""
    out = {f: frame.evaluate(f"kw({fields[f]})") for f in FIELDS if f != "load_w"}
    out["load_w"] = "uses " + frame.evaluate(f"kw({fields['load_w']})")
    return out


def energy_expected(frame: Frame, period: dict[str, Any]) -> dict[str, str]:
    """The texts the view's own formatter gives the report's figures (kWh, %, money)."""
    f = period["figures"]
    keys = ("importKWh", "exportKWh", "pvKWh", "selfSufficiencyPercent", "importCost")
    args = {k: json.dumps([k, f.get(k), f.get("currency")]) for k in keys}
    return {k: frame.evaluate(f"energyText(...{a})") for k, a in args.items()}


def energy_shown(frame: Frame) -> dict[str, str]:
    return frame.evaluate(  # type: ignore[no-any-return]
        "Object.fromEntries([...document.querySelectorAll('[data-energy]')]"
        ".map(e => [e.dataset.energy, e.textContent]))"
    )


def wait_shown(frame: Frame, want: dict[str, str]) -> bool:
    end = time.monotonic() + WAIT_MS / 1000
    while time.monotonic() < end:
        got = shown(frame)
        if all(got.get(k) == v for k, v in want.items()):
            return True
        time.sleep(0.25)
    return False


def run(page: Page, cfg: dict[str, Any], seen: dict[str, Any], calls: list[str]) -> None:
    shots = Path(cfg["shots"])
    frame = open_view(page, cfg, theme="light", width="520")
    host = page.evaluate(
        "({tools: window.__host.tools, csp: window.__host.csp, bytes: window.__host.viewBytes, sizes: window.__host.sizes})"
    )
    seen["host"] = host
    first = expected(frame, cfg["first"])
    seen["first_ok"] = wait_shown(frame, first)
    seen["first"] = {"want": first, "shown": shown(frame)}
    time.sleep(12)  # past the sources' staleAfterMs (10 s) with no state moving: still live
    seen["still_live"] = {"want": first, "shown": shown(frame)}
    want = energy_expected(frame, cfg["energy"])
    seen["energy"] = {"want": want, "shown": energy_shown(frame)}
    seen["energy_head"] = frame.inner_text("#energyhead")
    seen["soc"] = frame.inner_text("#soc")
    seen["reasons"] = frame.evaluate(
        "[...document.querySelectorAll('#reasons li')].map(l => l.textContent)"
    )
    seen["bars"] = frame.evaluate("document.querySelectorAll('#plan rect').length")
    seen["chargers"] = frame.inner_text("#chargers")
    seen["read"] = frame.inner_text("#read")
    settled(page, frame)
    page.locator("iframe").screenshot(path=str(shots / "apps-light.png"))
    console(cfg["console"], {"home": cfg["home"], "op": "clock", "frozenMs": cfg["secondMs"]})
    second = expected(frame, cfg["second"])
    seen["second_ok"] = wait_shown(frame, second)
    seen["second"] = {"want": second, "shown": shown(frame), "note": frame.inner_text("#note")}
    seen["second"]["sources"] = frame.inner_text("#sources")
    console(
        cfg["console"],
        {"home": cfg["home"], "op": "source", "id": "inverter.sungrow", "lagMs": 600_000},
    )
    seen["stale_ok"] = wait_shown(frame, {"pv_w": "stale"})
    seen["stale_row"] = frame.evaluate(
        "document.querySelector('tr[data-source=\"inverter.sungrow\"]').textContent"
    )
    settled(page, frame)
    page.locator("iframe").screenshot(path=str(shots / "apps-stale.png"))
    console(
        cfg["console"],
        {"home": cfg["home"], "op": "source", "id": "inverter.sungrow", "lagMs": None},
    )
    frame.click("#charge")
    page.wait_for_function("window.__host.messages.length > 0", timeout=WAIT_MS)
    seen["messages"] = page.evaluate("window.__host.messages")
    seen["frame_fetch"] = frame.evaluate(
        "u => fetch(u, {method: 'POST'}).then(() => 'allowed', e => 'blocked: ' + e.name)",
        cfg["mcp"],
    )
    page.evaluate("window.__host.setTheme('dark')")  # ui/notifications/host-context-changed
    poll(frame, "document.documentElement.dataset.theme === 'dark'")
    page.evaluate("window.__host.cancel('stopped by the test')")  # tool-cancelled
    poll(frame, "document.getElementById('note').textContent.includes('stopped by the test')")
    seen["context_and_cancel"] = True
    page.evaluate("window.__host.teardown()")
    seen["after_teardown"] = frame.evaluate("[window.__view.stopped, !!window.__view.tornDown]")
    before = calls.count("home_view_live")
    time.sleep(7)  # more than one poll period
    seen["polls_after_teardown"] = calls.count("home_view_live") - before
    page.evaluate("window.__host.remove()")
    seen["frames_left"] = page.evaluate("document.querySelectorAll('iframe').length")


def run_dark(page: Page, cfg: dict[str, Any], seen: dict[str, Any]) -> None:
    frame = open_view(page, cfg, theme="dark", width="360")
    seen["dark"] = {
        "bg": frame.evaluate("getComputedStyle(document.body).backgroundColor"),
        "scrollWidth": frame.evaluate("document.documentElement.scrollWidth"),
        "theme": frame.evaluate("document.documentElement.dataset.theme"),
    }
    settled(page, frame)
    page.locator("iframe").screenshot(path=str(Path(cfg["shots"]) / "apps-dark-360.png"))


def main() -> None:
    cfg = json.loads(sys.argv[1])
    seen: dict[str, Any] = {"console": [], "frame_requests": [], "foreign": []}
    calls: list[str] = []
    allowed = (cfg["host"], cfg["mcp"].rsplit("/mcp", 1)[0])

    def on_request(req: Any) -> None:
        if req.frame is not req.frame.page.main_frame:
            seen["frame_requests"].append(req.url)
        if not req.url.startswith(allowed):
            seen["foreign"].append(req.url)
        body = req.post_data or ""
        if '"tools/call"' in body:
            calls.append(json.loads(body)["params"]["name"])

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=shutil.which("chromium"), args=ARGS)
        for shape, fn in (((560, 1400), run), ((400, 1300), run_dark)):  # tall: no stitching
            page = browser.new_page(viewport={"width": shape[0], "height": shape[1]})
            page.on("request", on_request)
            page.on("console", lambda m: seen["console"].append(f"{m.type}: {m.text}"))
            try:
                fn(page, cfg, seen) if fn is run_dark else run(page, cfg, seen, calls)
            except Exception as exc:  # report what was seen, not only the timeout
                seen.setdefault("error", f"{fn.__name__}: {type(exc).__name__}: {exc}")
            page.close()
        browser.close()
    seen["calls"] = sorted(set(calls))
    print(json.dumps(seen))


if __name__ == "__main__":
    main()
