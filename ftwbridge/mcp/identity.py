"""What a client is told about this server: `serverInfo` (MCP `Implementation`: name, title,
version, description, websiteUrl, icons) and the icon every tool carries.

The icon is an SVG sent inline as a `data:` URI (MCP 2025-11-25, `Icon.src` may be one), so a
client shows it without fetching anything from anywhere: the bridge serves it in the answer.
"""

from __future__ import annotations

import base64
from typing import Any, Final

from ftwbridge import __version__

ICON_SVG: Final = (
    b'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 64 64">'
    b'<rect width="64" height="64" rx="14" fill="#0969da"/>'
    b'<path d="M14 34 32 16l18 18v16H14z" fill="#fff"/>'
    b'<path d="M35 24 27 37h6l-3 11 9-15h-6z" fill="#f2b600"/>'
    b"</svg>"
)
"""A house with a bolt: the home's energy, 64 x 64."""

ICONS: Final[list[dict[str, Any]]] = [
    {
        "src": "data:image/svg+xml;base64," + base64.b64encode(ICON_SVG).decode(),
        "mimeType": "image/svg+xml",
        "sizes": ["any"],
    }
]

WEBSITE_URL: Final = "https://github.com/srcfl/ftwbridge"

SERVER_INFO: Final[dict[str, Any]] = {
    "name": "ftwbridge",
    "title": "FTW home energy",
    "version": __version__,
    "description": (
        "Reads a home's energy box (solar, battery, EV chargers, prices and plan) end to end"
        " encrypted, within what the home's owner approved at home; with their grant, starts"
        " and stops charging and asks the owner for lasting changes."
    ),
    "websiteUrl": WEBSITE_URL,
    "icons": ICONS,
}
