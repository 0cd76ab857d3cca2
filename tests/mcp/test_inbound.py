"""`inbound.classify` without sockets: each numbered check of the module docstring."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from ftwbridge.mcp.inbound import Rejection, Route, classify, decode_header
from ftwbridge.mcp.words import WORDS, sentence
from ftwbridge.proto.names import Code

META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
}


def h(**values: str) -> dict[str, list[str]]:
    return {k.replace("_", "-"): [v] for k, v in values.items()}


def modern(method: str = "tools/list", **extra: str) -> dict[str, list[str]]:
    return h(mcp_protocol_version="2026-07-28", mcp_method=method, **extra)


def body(method: str = "tools/list", rid: Any = 1, **params: Any) -> bytes:
    return json.dumps(
        {"jsonrpc": "2.0", "id": rid, "method": method, "params": {"_meta": META, **params}}
    ).encode()


def test_modern_route() -> None:
    assert classify(modern(), body()) == Route(
        "modern", "2026-07-28", "tools/list", {"_meta": META}, 1
    )


def test_legacy_routes() -> None:
    raw = json.dumps({"jsonrpc": "2.0", "id": "a", "method": "tools/list"}).encode()
    assert classify({}, raw) == Route("legacy", "2025-03-26", "tools/list", {}, "a")
    assert classify(h(mcp_protocol_version="2025-11-25"), raw).version == "2025-11-25"  # type: ignore[union-attr]
    old = classify(h(mcp_protocol_version="2024-11-05"), raw)
    assert isinstance(old, Rejection) and old.code == -32022


@pytest.mark.parametrize(
    ("headers", "raw", "status", "code", "rid"),
    [
        (modern(), b"[", 400, -32700, None),
        (modern(), b"[]", 400, -32600, None),
        (modern(), b'{"jsonrpc":"2.0","id":true,"method":"x"}', 400, -32600, None),
        (modern(), b'{"jsonrpc":"1.0","id":5,"method":"x"}', 400, -32600, 5),
        (
            modern(),
            json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}).encode(),
            400,
            -32602,
            2,
        ),
        (modern("tools/call"), body(), 400, -32020, 1),
        (modern("tools/call", mcp_name="x"), body("tools/call", name="y"), 400, -32020, 1),
        (
            {"mcp-protocol-version": ["2026-07-28", "2026-07-28"], "mcp-method": ["tools/list"]},
            body(),
            400,
            -32020,
            1,
        ),
        (h(mcp_protocol_version="2031-01-01", mcp_method="tools/list"), body(), 400, -32020, 1),
    ],
)
def test_rejections(
    headers: dict[str, list[str]], raw: bytes, status: int, code: int, rid: Any
) -> None:
    r = classify(headers, raw)
    assert isinstance(r, Rejection) and (r.status, r.code, r.id) == (status, code, rid)


def test_unsupported_version_lists_ours() -> None:
    meta = META | {"io.modelcontextprotocol/protocolVersion": "2031-01-01"}
    raw = json.dumps(
        {"jsonrpc": "2.0", "id": 9, "method": "tools/list", "params": {"_meta": meta}}
    ).encode()
    r = classify(h(mcp_protocol_version="2031-01-01", mcp_method="tools/list"), raw)
    assert isinstance(r, Rejection) and r.code == -32022 and r.data["supported"] == ["2026-07-28"]


def test_base64_header_form() -> None:
    name = "héllo wörld"
    encoded = "=?base64?" + base64.b64encode(name.encode()).decode() + "?="
    assert decode_header(encoded) == name
    assert decode_header("=?base64?not base64?=") is None
    assert decode_header("plain") == "plain"
    r = classify(modern("tools/call", mcp_name=encoded), body("tools/call", name=name))
    assert isinstance(r, Route)


def test_notifications() -> None:
    raw = b'{"jsonrpc":"2.0","method":"notifications/initialized"}'
    assert classify({}, raw) == Route("legacy", "2025-03-26", "notifications/initialized", {}, None)
    bad = classify(h(mcp_protocol_version="2031-01-01"), raw)
    assert isinstance(bad, Rejection) and bad.code == -32022 and bad.id is None


def test_every_code_has_words() -> None:
    assert set(WORDS) == set(Code)
    for code in Code:
        assert sentence(code, {}).endswith(".")
    assert sentence("E_RATE_LIMITED", {"retryAfterMs": 2500}).endswith("try again in 3 s.")
    assert "ftw.plan.read" in sentence("E_SCOPE_DENIED", {"needScope": "ftw.plan.read"})
    assert sentence("E_FROM_THE_FUTURE") == "The home refused the request (E_FROM_THE_FUTURE)."


def legacy_call(name: str, version: str | None) -> tuple[dict[str, list[str]], bytes]:
    params = {"name": name, "arguments": {}}
    raw = json.dumps({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params})
    return ({} if version is None else h(mcp_protocol_version=version)), raw.encode()


@pytest.mark.parametrize("version", [None, "2025-03-26", "2025-06-18", "2025-11-25"])
def test_mirrored_headers_are_checked_in_every_era(version: str | None) -> None:
    """A proxy acts on `Mcp-Method`/`Mcp-Name` (HAProxy retries reads): a legacy request that
    sends them is held to them, as a 2026-07-28 one is; one that sends none is not asked to."""
    headers, raw = legacy_call("ev_charge_now", version)
    assert isinstance(classify(headers, raw), Route)
    for labels in (
        {"mcp-method": ["tools/call"], "mcp-name": ["status"]},
        {"mcp-name": ["status"]},
        {"mcp-method": ["tools/list"]},
        {"mcp-method": ["tools/call"], "mcp-name": ["ev_charge_now", "status"]},
        {"mcp-method": ["tools/call", "tools/list"], "mcp-name": ["ev_charge_now"]},
        {"mcp-name": ["ev_charge_now, status"]},
    ):
        out = classify(headers | labels, raw)
        assert isinstance(out, Rejection) and out.code == -32020 and out.status == 400, labels
    honest = {"mcp-method": ["tools/call"], "mcp-name": [encode("ev_charge_now")]}
    assert isinstance(classify(headers | honest, raw), Route)


def encode(text: str) -> str:
    return "=?base64?" + base64.b64encode(text.encode()).decode() + "?="
