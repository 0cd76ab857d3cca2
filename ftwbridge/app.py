"""The HTTP shell: a Quart-trio app with `/mcp`, `/v1/box` and the RFC 9728 metadata.

Thin on purpose: it checks Host and Origin (DNS rebinding), turns Quart's request into an
`HttpRequest` for `McpService`, and hands the box WebSocket to the door.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, cast
from urllib.parse import urlsplit

from quart import Response, request, websocket
from quart_trio import QuartTrio
from werkzeug.exceptions import RequestEntityTooLarge, RequestTimeout

from ftwbridge.door import Door
from ftwbridge.mcp.server import BodyTooLarge, BodyTooSlow, HttpRequest, McpService
from ftwbridge.proto.registry import READ_SCOPES

MCP_METHODS = ["POST", "GET", "DELETE", "PUT", "PATCH", "HEAD", "OPTIONS"]


@dataclass(slots=True)
class Site:
    """What the shell needs once the listener is bound: the public URL and allowed Host/Origin."""

    public_url: str
    allowed_hosts: set[str] = field(default_factory=set)
    allowed_origins: set[str] = field(default_factory=set)

    @property
    def resource(self) -> str:
        """The `/mcp` URL: the OAuth resource and token audience (RFC 8707)."""
        return self.public_url.rstrip("/") + "/mcp"

    @property
    def metadata_url(self) -> str:
        """The RFC 9728 protected-resource metadata URL for `/mcp`."""
        return self.public_url.rstrip("/") + "/.well-known/oauth-protected-resource/mcp"

    def allow_url(self, url: str) -> None:
        """Allow the Host and Origin of `url` (scheme://host:port)."""
        parts = urlsplit(url)
        self.allowed_hosts.add(parts.netloc.lower())
        self.allowed_origins.add(f"{parts.scheme}://{parts.netloc}".lower())


def _headers() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for name, value in request.headers.items():
        out.setdefault(name.lower(), []).append(value)
    return out


def create_app(
    *, site: Site, service: McpService, door: Door, max_body_bytes: int, body_timeout_s: float
) -> QuartTrio:
    """Build the app; routes read `site` at request time (its URL is set once bound)."""
    app = QuartTrio("ftwbridge")
    app.config["MAX_CONTENT_LENGTH"] = max_body_bytes
    app.config["BODY_TIMEOUT"] = body_timeout_s
    app.config["PROVIDE_AUTOMATIC_OPTIONS"] = False

    def _metadata() -> dict[str, Any]:
        return {
            "resource": site.resource,
            "authorization_servers": [site.public_url.rstrip("/")],
            "scopes_supported": sorted(s.value for s in READ_SCOPES),
            "bearer_methods_supported": ["header"],
            "resource_name": "ftwbridge",
        }

    @app.route("/mcp", methods=MCP_METHODS, provide_automatic_options=False)
    async def mcp() -> Response:
        host = request.headers.get("host", "").lower()
        if host not in site.allowed_hosts:
            return Response(
                b'{"error":"misdirected request"}', 421, {"content-type": "application/json"}
            )
        origin = request.headers.get("origin")
        if origin is not None and origin.lower() not in site.allowed_origins:
            body = b'{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Origin not allowed"}}'
            return Response(body, 403, {"content-type": "application/json"})

        async def read_body() -> bytes:
            try:
                data = await request.get_data(cache=False, as_text=False)
                return data if isinstance(data, bytes) else data.encode()
            except RequestEntityTooLarge:
                raise BodyTooLarge() from None
            except RequestTimeout:
                raise BodyTooSlow() from None

        req = HttpRequest(request.method, _headers(), read_body, request.content_length)
        resp = await service.handle(req)
        return Response(resp.body, resp.status, resp.headers)

    @app.route("/.well-known/oauth-protected-resource/mcp")
    @app.route("/.well-known/oauth-protected-resource")
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

    @app.websocket("/v1/box")
    async def box() -> None:
        await websocket.accept()
        ws = cast(Any, websocket)._get_current_object()  # the proxy is task-local
        await door.serve_uplink(ws)

    return app
