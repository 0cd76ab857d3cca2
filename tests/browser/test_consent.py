"""The consent page in a real headless Chromium: rendered escaped, follows the request, and
lands on the client's redirect with a code after the stub home approves, or with
`access_denied` after it denies. Screenshots go to the test's output directory."""

from __future__ import annotations

import functools
import json
import shutil
import sys
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx2
import pytest
import trio

from tests.e2e.env import REAL_WAIT_S, Env
from tests.oauth.test_flow import pkce

DRIVER = Path(__file__).with_name("drive_consent.py")


async def assistant_listener(nursery: trio.Nursery) -> str:
    """The assistant's loopback redirect listener: answers any request with a short page."""

    async def answer(stream: trio.SocketStream) -> None:
        async with stream:
            with trio.move_on_after(REAL_WAIT_S):
                buf = b""
                while b"\r\n\r\n" not in buf:
                    chunk = await stream.receive_some(4096)
                    if not chunk:
                        return
                    buf += chunk
                body = b"<p>back at the assistant</p>"
                head = f"HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: {len(body)}\r\nconnection: close\r\n\r\n"
                await stream.send_all(head.encode() + body)

    listeners = await nursery.start(functools.partial(trio.serve_tcp, answer, 0, host="127.0.0.1"))
    return f"http://127.0.0.1:{listeners[0].socket.getsockname()[1]}/callback"


async def authorize_url(env: Env, redirect: str) -> str:
    base = env.bridge.site.public_url
    async with httpx2.AsyncClient() as http:
        reg = await http.post(
            base + "/oauth/register",
            json={"redirect_uris": [redirect], "client_name": "<b>Bold</b> \u202eassistant"},
        )
    _, challenge = pkce()
    params = {
        "response_type": "code",
        "client_id": reg.json()["client_id"],
        "redirect_uri": redirect,
        "code_challenge": challenge,
        "code_challenge_method": "S256",
        "state": "b1",
    }
    return str(httpx2.URL(base + "/authorize", params=params))


async def drive(url: str, code: str, redirect: str, shot: Path) -> dict[str, str]:
    if shutil.which("chromium") is None:
        pytest.fail("Debian's chromium is not installed: make test installs it (make browser)")
    with trio.fail_after(90):
        done = await trio.run_process(
            [sys.executable, str(DRIVER), url, code, redirect, str(shot)],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    return json.loads(done.stdout.decode().strip().splitlines()[-1])  # type: ignore[no-any-return]


async def test_approved_in_chromium(env: Env, tmp_path: Path, nursery: trio.Nursery) -> None:
    redirect = await assistant_listener(nursery)
    home = await env.add_home("h1", "--approve-all")
    code = (await home.console(op="claim"))["code"]
    seen = await drive(await authorize_url(env, redirect), code, redirect, tmp_path / "consent.png")
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
    url = await authorize_url(env, redirect)
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
