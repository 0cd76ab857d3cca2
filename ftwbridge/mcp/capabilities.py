"""What `/mcp` declares it serves, in one place (`server/discover` at 2026-07-28, `initialize`
before it): a declaration that promised more than is served fails real clients and the
conformance suite alike, so every served feature adds its key here and nowhere else."""

from __future__ import annotations

from typing import Any

from .apps import CAPABILITIES_EXTENSIONS


def capabilities(era: str, *, listen: bool) -> dict[str, Any]:
    """The `capabilities` object for `era` (`modern` or `legacy`).

    Tools, resources and prompts are always served (`mcp/catalog.py`), and none of their lists
    changes while a token lives; the MCP Apps extension is declared under `extensions`
    (`mcp/apps.py`: the home view, for a client that declares its mime type). `listen`: `subscriptions/listen` is served, so a 2026-07-28
    client may subscribe to resource updates (`resources.subscribe: true`); a legacy client is
    told `false`, since `resources/subscribe` is not served (it polls `resources/read`).
    """
    return {
        "tools": {"listChanged": False},
        "resources": {"subscribe": listen and era == "modern", "listChanged": False},
        "prompts": {"listChanged": False},
        "extensions": CAPABILITIES_EXTENSIONS,
    }
