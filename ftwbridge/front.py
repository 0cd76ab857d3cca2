"""`GET /` on the main listener: one paragraph saying what answers here and where to connect,
for the person who opens the bridge's address in a browser (instead of a bare 404)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from quart import Response
from quart_trio import QuartTrio

from ftwbridge import __version__

if TYPE_CHECKING:
    from ftwbridge.site import Site


def add_front_page(app: QuartTrio, site: Site) -> None:
    """Serve `/`: the version, and the MCP URL an assistant connects to (read at request
    time, as the URL is set once the listener is bound)."""

    @app.route("/", methods=["GET"])
    async def front() -> Response:
        text = (
            f"ftwbridge {__version__}: an MCP server for home energy boxes.\n"
            f"Assistants connect to {site.resource} (MCP Streamable HTTP, OAuth 2.1 sign-in with"
            " the code a home shows its owner).\n"
        )
        return Response(
            text.encode(),
            200,
            {"content-type": "text/plain; charset=utf-8", "x-content-type-options": "nosniff"},
        )
