"""The refusal `ftwbridge.framing` words before any route runs is the one `/mcp` words itself
(`mcp.inbound.Rejection`), written apart so that `framing` imports nothing of `mcp`."""

from __future__ import annotations

import json

from mcp_types import jsonrpc

from ftwbridge.framing import refusal_body
from ftwbridge.mcp.inbound import Rejection


def test_the_mcp_refusal_is_inbounds_rejection_byte_for_byte() -> None:
    words = "Content-Length and Transfer-Encoding together are refused"
    ours = json.dumps(refusal_body("/mcp", words))
    assert ours == json.dumps(Rejection(400, jsonrpc.INVALID_REQUEST, words).body())


def test_elsewhere_the_refusal_is_oauth_shaped() -> None:
    assert refusal_body("/token", "no") == {"error": "invalid_request", "error_description": "no"}


def test_framing_imports_nothing_of_mcp() -> None:
    import ast
    from pathlib import Path

    import ftwbridge.framing

    tree = ast.parse(Path(ftwbridge.framing.__file__).read_text())
    imported = [
        n.module if isinstance(n, ast.ImportFrom) else a.name
        for n in ast.walk(tree)
        if isinstance(n, ast.Import | ast.ImportFrom)
        for a in n.names
    ]
    assert not [m for m in imported if m and m.startswith("ftwbridge.mcp")], imported
