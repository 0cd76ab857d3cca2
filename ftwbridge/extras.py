"""Commands that need an optional extra of the wheel, and the one sentence that says which.

The wheel installs what every command needs but one: `ftwbridge demo` drives the bridge with
the official MCP Python client (`mcp`), a dependency operators need not carry. Without it the
demo says so and how to add it, instead of a traceback at its first import.
"""

from __future__ import annotations

import importlib.util

NEEDS: dict[str, tuple[str, str, str]] = {
    "demo": ("mcp", "demo", "the official MCP Python client (the demo's assistant)"),
}
"""command -> (module it imports, the extra that installs it, what it is)."""


def missing_extra(command: str) -> str | None:
    """The sentence for `command` when the module it needs is not installed, else None."""
    need = NEEDS.get(command)
    if need is None or importlib.util.find_spec(need[0]) is not None:
        return None
    module, extra, what = need
    return (
        f"ftwbridge {command} needs {what}, which is not installed: pip install"
        f" 'ftwbridge[{extra}]' (or pip install {module} into this environment)"
    )
