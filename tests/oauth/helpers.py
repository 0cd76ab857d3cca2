"""Small pieces the OAuth and browser tests share: PKCE, an authorization request's parameters,
the consent form's hidden fields, and a one-shot HTTP server for a client's own origin."""

from __future__ import annotations

import base64
import functools
import hashlib
import re
import secrets
from collections.abc import Callable

import trio

from tests.e2e.env import REAL_WAIT_S


def pkce() -> tuple[str, str]:
    """A fresh PKCE (verifier, S256 challenge) pair (RFC 7636 section 4)."""
    verifier = secrets.token_urlsafe(48)
    digest = hashlib.sha256(verifier.encode()).digest()
    return verifier, base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def authorize_params(
    client_id: str, redirect_uri: str, challenge: str, state: str = "s1"
) -> dict[str, str]:
    """The parameters of an authorization request with PKCE S256, as a client sends them."""
    return {
        "response_type": "code",
        "client_id": client_id,
        "redirect_uri": redirect_uri,
        "code_challenge": challenge,
        "code_challenge_method": "S256",
        "state": state,
    }


def form_fields(html: str) -> dict[str, str]:
    """The consent form's hidden `req` and `csrf` fields."""
    return dict(re.findall(r'name="(req|csrf)" value="([^"]+)"', html))


async def serve_tiny_http(nursery: trio.Nursery, answer: Callable[[str], tuple[bytes, str]]) -> int:
    """An HTTP/1.1 server on 127.0.0.1, port 0, for a test's own origin: it reads a request's
    head, answers 200 with `answer(path)` -> (body, content type) and closes. Returns the port."""

    async def serve(stream: trio.SocketStream) -> None:
        async with stream:
            with trio.move_on_after(REAL_WAIT_S):
                buf = b""
                while b"\r\n\r\n" not in buf:
                    chunk = await stream.receive_some(65536)
                    if not chunk:
                        return
                    buf += chunk
                path = buf.split(b" ", 2)[1].decode("latin-1").split("?")[0]
                body, kind = answer(path)
                head = f"HTTP/1.1 200 OK\r\ncontent-type: {kind}\r\ncontent-length: {len(body)}\r\nconnection: close\r\n\r\n"
                await stream.send_all(head.encode() + body)

    listeners = await nursery.start(functools.partial(trio.serve_tcp, serve, 0, host="127.0.0.1"))
    return int(listeners[0].socket.getsockname()[1])
