"""CORS as browser-based clients need it (docs/auth.md, "CORS").

In a real headless Chromium, a page served on another loopback port than the bridge's runs the
official TypeScript client (bundled from peers/ for the browser): it discovers the bridge from
the 401 at `/mcp`, registers, sends the person to the consent page (where the test types the
home's claim code), exchanges the code and reads `status`, every request cross-origin. And the
preflights, answered as the Fetch standard wants, checked header by header."""

from __future__ import annotations

from pathlib import Path

import httpx2
import pytest
import trio

from tests.browser.test_consent import run_driver
from tests.e2e.env import REAL_WAIT_S, Env
from tests.oauth.helpers import serve_tiny_http

HERE = Path(__file__).parent
ROOT = HERE.parents[1]
PEERS = ROOT / "peers"
TYPES = {".mjs": "text/javascript", ".html": "text/html; charset=utf-8"}
PAGE = b"<!doctype html><title>assistant</title><script type=module src=/app.mjs></script>"


async def app_server(nursery: trio.Nursery, files: dict[str, Path]) -> str:
    """The assistant's own origin: `/` and `/callback` are its page, the rest `files`."""

    def answer(path: str) -> tuple[bytes, str]:
        if path in files:
            return files[path].read_bytes(), TYPES[files[path].suffix]
        return PAGE, TYPES[".html"]

    return f"http://127.0.0.1:{await serve_tiny_http(nursery, answer)}"


async def bundle(out: Path) -> None:
    node = PEERS / "node_modules" / ".bin" / "node"
    if not node.exists():
        pytest.fail("peers/node_modules is missing: make test installs it (make peers)")
    with trio.fail_after(REAL_WAIT_S):
        done = await trio.run_process(
            [str(node), str(HERE / "bundle_client.mjs"), str(PEERS), str(out)],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    assert done.returncode == 0, done.stderr.decode()[-2000:]


async def test_preflights_and_exposed_headers(env: Env) -> None:
    base = env.bridge.site.public_url
    page = "http://127.0.0.1:1"
    env.bridge.site.allowed_origins.add(page)
    asks = {
        "origin": page,
        "access-control-request-method": "POST",
        "access-control-request-headers": "authorization, content-type, mcp-protocol-version, mcp-method, mcp-name",
    }
    async with httpx2.AsyncClient(timeout=REAL_WAIT_S) as http:
        for path in (
            "/.well-known/oauth-authorization-server",
            "/.well-known/oauth-protected-resource/mcp",
            "/oauth/register",
            "/oauth/token",
            "/oauth/revoke",
        ):
            r = await http.options(base + path, headers=asks)
            assert r.status_code == 204, (path, r.status_code)
            assert r.headers["access-control-allow-origin"] == "*"
            allowed = r.headers["access-control-allow-headers"].split(", ")
            assert {
                "authorization",
                "content-type",
                "mcp-protocol-version",
                "mcp-method",
                "mcp-name",
            } <= set(allowed)
        r = await http.options(env.url, headers=asks)
        assert r.status_code == 204 and r.headers["access-control-allow-origin"] == page
        assert "POST" in r.headers["access-control-allow-methods"]
        r = await http.post(env.url, json={}, headers={"origin": page})
        assert r.status_code == 401 and r.headers["access-control-allow-origin"] == page
        exposed = r.headers["access-control-expose-headers"].lower()
        assert "www-authenticate" in exposed and "mcp-session-id" not in exposed
        # an origin the operator did not allow gets no CORS answer from /mcp, only the refusal
        stranger = asks | {"origin": "http://evil.example"}
        r = await http.options(env.url, headers=stranger)
        assert "access-control-allow-origin" not in r.headers
        r = await http.post(env.url, json={}, headers={"origin": "http://evil.example"})
        assert r.status_code == 403 and "access-control-allow-origin" not in r.headers


async def test_typescript_client_signs_in_from_a_browser_page(
    env: Env, tmp_path: Path, nursery: trio.Nursery
) -> None:
    await bundle(tmp_path / "client.mjs")
    app = await app_server(
        nursery, {"/client.mjs": tmp_path / "client.mjs", "/app.mjs": HERE / "app_page.mjs"}
    )
    env.bridge.site.allowed_origins.add(app)  # the operator lists the assistant's origin
    home = await env.add_home("h1", "--approve-all")
    code = (await home.console(op="claim"))["code"]
    seen = await run_driver("drive_browser_client.py", app, env.url, code)
    result = seen["result"]
    assert result["ok"] and not result["isError"], seen
    assert "grid_w" in result["fields"], seen
    assert not [e for e in seen["console"] if "CORS" in e], seen["console"]
