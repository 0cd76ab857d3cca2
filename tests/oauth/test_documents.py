"""Client ID Metadata Documents: fetched with strict bounds, then the same flow as registration.

A loopback HTTP server stands in for https here (the bridge's `test_loopback_metadata`
profile); in production only https documents are fetched.
"""

from __future__ import annotations

import json

import httpx2
import pytest
import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.trio import serve
from quart import Response
from quart_trio import QuartTrio

from tests.e2e.env import Env
from tests.oauth.helpers import authorize_params, pkce

from .test_flow import REDIRECT, person_consents


async def documents_server(nursery: trio.Nursery) -> str:
    app = QuartTrio("docs")
    base: list[str] = []

    @app.route("/<name>")
    async def doc(name: str) -> Response:
        url = f"{base[0]}/{name}"
        if name == "good.json":
            body = {"client_id": url, "client_name": "Doc <client>", "redirect_uris": [REDIRECT]}
            return Response(
                json.dumps(body),
                200,
                {"content-type": "application/json", "cache-control": "max-age=60"},
            )
        if name == "redirect.json":
            return Response(b"", 302, {"location": f"{base[0]}/good.json"})
        if name == "big.json":
            return Response(
                json.dumps({"client_id": url, "pad": "x" * 70_000}),
                200,
                {"content-type": "application/json"},
            )
        if name == "other.json":
            return Response(
                json.dumps({"client_id": f"{base[0]}/good.json", "redirect_uris": [REDIRECT]}),
                200,
                {"content-type": "application/json"},
            )
        if name == "html.json":
            return Response(b"<html></html>", 200, {"content-type": "text/html"})
        return Response(b"", 404)

    cfg = HypercornConfig()
    cfg.bind = ["127.0.0.1:0"]
    cfg.accesslog = None
    bound = await nursery.start(serve, app, cfg)
    base.append(bound[0])
    return base[0]


# Stopping at 64 KiB leaves httpcore2's inner stream generator to the garbage collector (a
# ResourceWarning from the library under trio); the bridge itself closes its response.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.config(test_loopback_metadata=True)
async def test_metadata_document_client(nursery: trio.Nursery, env: Env) -> None:
    docs = await documents_server(nursery)
    home = await env.add_home("h1", "--approve-all")
    base = env.bridge.site.public_url
    client_id = f"{docs}/good.json"
    verifier, challenge = pkce()
    params = authorize_params(client_id, REDIRECT, challenge, "d") | {"resource": env.url}
    query, page = await person_consents(
        env, home, str(httpx2.URL(base + "/authorize", params=params))
    )
    assert "Doc &lt;client&gt;" in page
    async with httpx2.AsyncClient(timeout=20, follow_redirects=False) as http:
        form = {
            "grant_type": "authorization_code",
            "code": query["code"][0],
            "client_id": client_id,
            "redirect_uri": REDIRECT,
            "code_verifier": verifier,
        }
        tokens = await http.post(base + "/oauth/token", data=form)
        assert tokens.status_code == 200, tokens.text
        for name in ("redirect.json", "big.json", "other.json", "html.json", "missing.json"):
            r = await http.get(base + "/authorize", params=params | {"client_id": f"{docs}/{name}"})
            assert r.status_code == 400, (name, r.status_code)
        meta = (await http.get(base + "/.well-known/oauth-authorization-server")).json()
        assert meta["client_id_metadata_document_supported"] is True
