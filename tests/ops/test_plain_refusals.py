"""The Quart apps' own refusals are sentences in plain text, not Quart's HTML pages: a path
that no route serves (404, naming what the listener serves), a method the route does not take
(405 with `Allow`, RFC 9110 section 15.5.6), on the main listener and on the admin listener,
sent as raw bytes; and the same words from `http_error_words` for each code Quart raises."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest
from quart_trio import QuartTrio
from werkzeug.exceptions import HTTPException, InternalServerError, RequestEntityTooLarge

from ftwbridge.framing import http_error_words
from tests.e2e.env import Env
from tests.ops.test_full_disk import raw_at


def _get(base: str, method: str, path: str) -> bytes:
    host = urlsplit(base).netloc
    return f"{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode()


@pytest.mark.parametrize("listener", ["main", "admin"])
async def test_no_route_is_a_sentence_naming_what_is_served(env: Env, listener: str) -> None:
    base = env.bridge.site.public_url if listener == "main" else env.bridge.admin_url
    status, headers, body = await raw_at(base, _get(base, "GET", "/nothing-here"))
    assert status == 404 and headers["content-type"] == "text/plain; charset=utf-8"
    text = body.decode()
    assert text.startswith("404 Not Found: nothing is served at this path on this listener;")
    assert ("/mcp" if listener == "main" else "/metrics, /healthz, /readyz") in text
    assert "<" not in text and text.endswith(".\n") and text.count("\n") == 1


async def test_a_method_the_route_does_not_take_names_those_it_does(env: Env) -> None:
    base = env.bridge.admin_url
    status, headers, body = await raw_at(base, _get(base, "DELETE", "/healthz"))
    allowed = ", ".join(sorted(m.strip() for m in headers["allow"].split(",")))
    assert status == 405 and "GET" in allowed
    assert headers["content-type"] == "text/plain; charset=utf-8"
    said = f"405 Method Not Allowed: this path does not take DELETE; it takes {allowed}.\n"
    assert body == said.encode()


@pytest.mark.parametrize(
    ("exc", "words"),
    [
        (RequestEntityTooLarge(), "413 Request Entity Too Large: the request's body is larger"),
        (InternalServerError(), "500 Internal Server Error: the request failed on the bridge;"),
        (HTTPException(), "500 Unknown Error: the request failed on the bridge;"),
    ],
)
async def test_each_code_quart_raises_has_words(exc: HTTPException, words: str) -> None:
    app = QuartTrio("words")
    async with app.test_request_context("/x"):
        answer = http_error_words(exc, "nothing")
        body = await answer.get_data()
    assert isinstance(body, bytes) and body.decode().startswith(words)
    assert answer.status_code == (exc.code or 500)
    assert answer.headers["content-type"] == "text/plain; charset=utf-8"
