"""The HTTP shell of the main listener: `/mcp` on plain ASGI, the rest in a Quart-trio app.

Thin on purpose. `/mcp` goes to `McpService` through `ftwbridge.mcp.asgi.McpRoute` (Host and
Origin checks, a bounded body); the OAuth endpoints, the consent pages and the RFC 9728
metadata are Quart routes. `/v1/box` and every WebSocket are refused in words (`NoDoorHere`):
the boxes' uplinks have the door's own listener (`door_bind`, `ftwbridge.door.listener`).
"""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Final

from quart import Response, request
from quart_trio import QuartTrio

from ftwbridge.consent_pages import NO_STORE, add_consent_pages
from ftwbridge.framing import framing_and_coding, plain_http_errors
from ftwbridge.front import add_front_page
from ftwbridge.mcp.asgi import (
    CORS_REQUEST_HEADERS,
    STORE_HEADERS,
    STORE_RETRY_AFTER_S,
    STORE_WORDS,
    McpRoute,
)
from ftwbridge.mcp.control_tools import TOOL_SCOPES
from ftwbridge.mcp.inbound import loads_strict
from ftwbridge.mcp.server import McpService
from ftwbridge.oauth import OAuthError, OAuthService, pages
from ftwbridge.oauth.model import with_basic_client
from ftwbridge.site import Site as Site
from ftwbridge.statewords import oauth_words
from ftwbridge.store import StoreError

log = logging.getLogger("ftwbridge.app")

DOOR_PATH: Final = "/v1/box"
Asgi = Callable[..., Awaitable[None]]  # any ASGI 3 app (Quart's types its events finer)
Message = MutableMapping[str, Any]


class NoDoorHere:
    """An ASGI app: the main listener's answer to `/v1/box` and to any WebSocket, else `app`.

    The boxes' uplinks have a listener of their own (`door_bind`, `ftwbridge.door.listener`)
    and the main one speaks no WebSocket, so a request for `/v1/box` (a plain one or a
    WebSocket opening handshake) and a WebSocket handshake to any other path get a 404 with a
    sentence naming `door_bind` and the door's port (`site.door_port`), plain text, and the
    connection closes after it. A WebSocket handshake is refused by any status but 101 (RFC
    6455 section 4.2.2, step 5); the answer is sent by the ASGI spec's WebSocket Denial
    Response extension (`websocket.http.response`), which hypercorn offers.
    """

    __slots__ = ("app", "site")

    def __init__(self, app: Asgi, site: Site) -> None:
        self.app = app
        self.site = site

    async def __call__(
        self, scope: Message, receive: Callable[[], Awaitable[Message]], send: Asgi
    ) -> None:
        kind = scope["type"]
        if kind == "lifespan" or (kind == "http" and scope.get("path") != DOOR_PATH):
            await self.app(scope, receive, send)
            return
        where = f"the door's own listener (door_bind, port {self.site.door_port} on this bridge)"
        if scope.get("path") == DOOR_PATH:
            words = (
                f"This port does not serve the box's uplink: {DOOR_PATH} is on {where}; point"
                f" the box, or the proxy's route for {DOOR_PATH}, at that port."
            )
        else:
            words = f"This port speaks no WebSocket; the box's uplink, {DOOR_PATH}, is on {where}."
        body = (words + "\n").encode()
        headers = [
            (b"content-type", b"text/plain; charset=utf-8"),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
        ]
        prefix = "http" if kind == "http" else "websocket.http"
        await send({"type": f"{prefix}.response.start", "status": 404, "headers": headers})
        await send({"type": f"{prefix}.response.body", "body": body})


CORS = {"access-control-allow-origin": "*", "access-control-allow-headers": CORS_REQUEST_HEADERS}
CORS_PUBLIC_PATHS = {
    "/.well-known/oauth-authorization-server": "GET, OPTIONS",
    "/.well-known/oauth-protected-resource": "GET, OPTIONS",
    "/.well-known/oauth-protected-resource/mcp": "GET, OPTIONS",
    "/oauth/register": "POST, OPTIONS",
    "/oauth/token": "POST, OPTIONS",
    "/oauth/revoke": "POST, OPTIONS",
}
"""Endpoints any origin may call (they carry no cookies or ambient authority) and their methods."""


def _json_response(status: int, value: Any, headers: dict[str, str] | None = None) -> Response:
    return Response(
        json.dumps(value), status, {"content-type": "application/json", **(headers or {})}
    )


def add_cors(app: QuartTrio) -> None:
    """CORS (Fetch standard) for browser-based clients: the metadata, registration, token and
    revocation endpoints answer preflights for any origin (`CORS_PUBLIC_PATHS`; they carry no
    cookies or ambient authority). `/mcp` answers its own, only for an allowed origin
    (`ftwbridge.mcp.asgi`)."""

    @app.before_request
    async def _preflight() -> Response | None:
        if request.method != "OPTIONS":
            return None
        methods = CORS_PUBLIC_PATHS.get(request.path)
        if methods is None:
            return None
        return Response(  # a preflight, or a plain OPTIONS asking what is allowed
            b"",
            204,
            CORS | {"access-control-allow-methods": methods, "access-control-max-age": "600"},
        )


def add_oauth_routes(app: QuartTrio, site: Site, oauth: OAuthService) -> None:
    """RFC 8414 metadata, RFC 7591 registration, `/authorize` with the consent pages, the token
    endpoint (RFC 6749, 7636, 8707) and RFC 7009 revocation."""
    add_consent_pages(app, site, oauth)

    def form_error(exc: OAuthError) -> Response:
        headers = NO_STORE | CORS
        if exc.error == "invalid_client":
            headers["www-authenticate"] = 'Bearer error="invalid_client"'
        return _json_response(exc.status if exc.status != 302 else 400, exc.body(), headers)

    @app.route("/.well-known/oauth-authorization-server", methods=["GET", "OPTIONS"])
    async def as_metadata() -> Response:
        return _json_response(
            200, oauth.metadata(), CORS | {"cache-control": "public, max-age=3600"}
        )

    @app.route("/oauth/register", methods=["POST", "OPTIONS"])
    async def register() -> Response:
        try:
            with oauth.audit.step("register", source=site.client()) as step:
                try:
                    body = loads_strict(await request.get_data(as_text=False))
                except (ValueError, RecursionError):
                    raise OAuthError("invalid_client_metadata", "the body must be JSON") from None
                kept = await oauth.register(body, site.client())
                step.client = str(kept.get("client_id", "-"))
            return _json_response(201, kept, CORS | NO_STORE)
        except OAuthError as exc:
            return form_error(exc)

    @app.route("/oauth/token", methods=["POST", "OPTIONS"])
    async def token() -> Response:
        form = {k: str(v) for k, v in (await request.form).items()}
        grant = form.get("grant_type")
        try:
            form = with_basic_client(form, request.headers.get("authorization"))
            step = "refresh" if grant == "refresh_token" else "exchange"
            with oauth.audit.step(step, client=form.get("client_id", "-"), source=site.client()):
                tokens = await oauth.token(form)
            return _json_response(200, tokens, NO_STORE | CORS)
        except OAuthError as exc:
            return form_error(exc)

    @app.route("/oauth/revoke", methods=["POST", "OPTIONS"])
    async def revoke() -> Response:
        try:
            with oauth.audit.step("revoke", source=site.client()) as step:
                held = await oauth.revoke({k: str(v) for k, v in (await request.form).items()})
                step.outcome, step.home = ("unknown", "-") if held is None else ("ok", held or "-")
        except OAuthError as exc:
            return form_error(exc)
        return Response(b"", 200, CORS)


async def _state_trouble(exc: Exception) -> Response:
    """A route met a full disk, a state folder it cannot write, or a damaged database
    (`ftwbridge.statewords`): OAuth's own form, 503 `temporarily_unavailable` in words (RFC
    6749 section 4.1.2.1, 5.2), or the consent page's, never an HTML 500. Anything else is
    raised again, as before."""
    words = oauth_words(exc)
    if words is None:
        raise exc
    log.error("%s %s failed on the state: %s", request.method, request.path, exc)
    if request.path.startswith("/authorize"):
        return Response(pages.problem(words), 503, pages.PAGE_HEADERS | STORE_HEADERS)
    body = {"error": "temporarily_unavailable", "error_description": words}
    return _json_response(503, body, STORE_HEADERS)


async def _store_unavailable(exc: StoreError) -> Response:
    """A Quart route needed the database while it does not answer (`StoreError`): 503 with
    `Retry-After` and the OAuth error `temporarily_unavailable` (RFC 6749 section 4.1.2.1)
    in words. The words name no host; the log line does. (`/mcp` answers its own form:
    `ftwbridge.mcp.asgi.store_unavailable`.) The consent pages are a person's browser: a
    page in the same words, which reloads itself after `Retry-After` when it was a GET (the
    waiting page polls; a JSON body would stop it for good)."""
    log.warning("%s %s refused: %s", request.method, request.path, exc)
    if request.path.startswith("/authorize"):
        again = STORE_RETRY_AFTER_S if request.method == "GET" else None
        return Response(
            pages.problem(STORE_WORDS, refresh_s=again),
            503,
            pages.PAGE_HEADERS | STORE_HEADERS,
        )
    body = {"error": "temporarily_unavailable", "error_description": STORE_WORDS}
    return _json_response(503, body, STORE_HEADERS)


def create_app(
    *,
    site: Site,
    service: McpService,
    max_body_bytes: int,
    body_timeout_s: float,
    oauth: OAuthService | None = None,
) -> NoDoorHere:
    """Build the main listener's ASGI app: `/mcp` straight to `service` (`McpRoute`), the
    rest in Quart, `/v1/box` and every WebSocket refused (`NoDoorHere`); routes read `site`
    at request time (its URL and the door's port are set once bound)."""
    app = QuartTrio("ftwbridge")
    app.config["MAX_CONTENT_LENGTH"] = max_body_bytes
    app.config["BODY_TIMEOUT"] = body_timeout_s
    app.config["PROVIDE_AUTOMATIC_OPTIONS"] = False
    plain_http_errors(app, "/mcp, OAuth's endpoints and their metadata, and the front page")
    app.register_error_handler(StoreError, _store_unavailable)
    app.register_error_handler(sqlite3.Error, _state_trouble)
    app.register_error_handler(OSError, _state_trouble)

    @app.before_request
    async def _framing_and_coding() -> Response | None:
        return await framing_and_coding()

    def _metadata() -> dict[str, Any]:
        return {
            "resource": site.resource,
            "authorization_servers": [site.public_url.rstrip("/")],
            "scopes_supported": sorted(TOOL_SCOPES),
            "bearer_methods_supported": ["header"],
            "resource_name": "ftwbridge",
        }

    @app.route("/.well-known/oauth-protected-resource/mcp", methods=["GET", "OPTIONS"])
    @app.route("/.well-known/oauth-protected-resource", methods=["GET", "OPTIONS"])
    async def resource_metadata() -> Response:
        return Response(
            json.dumps(_metadata()),
            200,
            {
                "content-type": "application/json",
                "cache-control": "public, max-age=3600",
                "access-control-allow-origin": "*",
            },
        )

    add_cors(app)
    add_front_page(app, site)
    if oauth is not None:
        add_oauth_routes(app, site, oauth)

    mcp = McpRoute(
        app,
        site=site,
        service=service,
        max_body_bytes=max_body_bytes,
        body_timeout_s=body_timeout_s,
    )
    return NoDoorHere(mcp, site)  # `/mcp` skips Quart
