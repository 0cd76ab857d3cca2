"""The consent page in a real headless Chromium: rendered escaped, follows the request, and
lands on the client's redirect with a code after the stub home approves, or with
`access_denied` after it denies. Screenshots go to the test's output directory."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx2
import pytest
import trio

from tests.e2e.env import REAL_WAIT_S, Env
from tests.oauth.helpers import authorize_params, pkce, serve_tiny_http

HERE = Path(__file__).parent
ROOT = HERE.parents[1]


async def assistant_listener(nursery: trio.Nursery) -> str:
    """The assistant's loopback redirect listener: answers any request with a short page."""
    port = await serve_tiny_http(nursery, lambda _: (b"<p>back at the assistant</p>", "text/html"))
    return f"http://127.0.0.1:{port}/callback"


async def authorize_url(env: Env, redirect: str, registered: str | None = None, **meta: str) -> str:
    """Register a client with `registered` (default `redirect`) and `meta`, and return the URL
    of its authorization request for `redirect`, state `b1`."""
    base = env.bridge.site.public_url
    body = {"redirect_uris": [registered or redirect]} | meta
    async with httpx2.AsyncClient(timeout=REAL_WAIT_S) as http:
        reg = await http.post(base + "/oauth/register", json=body)
    assert reg.status_code == 201, reg.text
    _, challenge = pkce()
    params = authorize_params(reg.json()["client_id"], redirect, challenge, "b1")
    return str(httpx2.URL(base + "/authorize", params=params))


async def run_driver(script: str, *args: str) -> Any:
    """Run a Playwright driver of this folder as its own process (Playwright's sync API is not
    trio); its last stdout line, as JSON."""
    if shutil.which("chromium") is None:
        pytest.fail("Debian's chromium is not installed: make test installs it (make browser)")
    with trio.fail_after(180):
        done = await trio.run_process(
            [sys.executable, str(HERE / script), *args],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            cwd=ROOT,
            env=os.environ | {"PYTHONPATH": str(ROOT)},
        )
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    return json.loads(done.stdout.decode().strip().splitlines()[-1])


async def drive(url: str, code: str, redirect: str, shot: Path) -> dict[str, str]:
    return await run_driver("drive_consent.py", url, code, redirect, str(shot))  # type: ignore[no-any-return]


async def test_approved_in_chromium(env: Env, tmp_path: Path, nursery: trio.Nursery) -> None:
    redirect = await assistant_listener(nursery)
    home = await env.add_home("h1", "--approve-all")
    code = (await home.console(op="claim"))["code"]
    url = await authorize_url(env, redirect, client_name="<b>Bold</b> \u202eassistant")
    seen = await drive(url, code, redirect, tmp_path / "consent.png")
    assert (
        "<b>Bold</b> assistant" in seen["shown"]
    )  # the markup shows as text; the bidi mark is gone
    query = parse_qs(urlsplit(seen["final"]).query)
    assert query["state"] == ["b1"] and len(query["code"][0]) > 20
    assert (tmp_path / "consent.png").stat().st_size > 1000


async def test_denied_in_chromium(env: Env, tmp_path: Path, nursery: trio.Nursery) -> None:
    redirect = await assistant_listener(nursery)
    home = await env.add_home("h1")
    code = (await home.console(op="claim"))["code"]
    url = await authorize_url(env, redirect, client_name="<b>Bold</b> \u202eassistant")
    result: list[dict[str, str]] = []

    async def browser() -> None:
        result.append(await drive(url, code, redirect, tmp_path / "consent-denied.png"))

    async with trio.open_nursery() as inner:
        inner.start_soon(browser)
        for _ in range(600):  # the box hears agent.request once the page is submitted
            pending = await home.console(op="requests")
            if pending:
                break
            await trio.sleep(0.05)
        await home.console(op="deny", req=pending[0]["req"])
    query = parse_qs(urlsplit(result[0]["final"]).query)
    assert query["error"] == ["access_denied"] and query["state"] == ["b1"]
