"""Classify one POST to `/mcp` into a route or a rejection, without I/O (PROTOCOL.md part D).

`classify(headers, body)` runs numbered checks and returns a `Route` (what to answer) or a
`Rejection` (HTTP status, JSON-RPC error, id); it raises nothing. Eras: a request whose
`MCP-Protocol-Version` header is absent or names a 2025 revision is legacy (absent means
2025-03-26, per the 2025-03-26 transport rules); any other value is checked as 2026-07-28.

Modern checks, in order (MCP 2026-07-28 transport, as the official SDK applies them):
  1. the body is JSON (-32700), one object (batches refused, -32600), `jsonrpc: "2.0"` with a
     text `method` and an id that is text or an integer (-32600, answered with `"id": null`);
  2. a notification is accepted (202) if its header names a supported version;
  3. `params._meta` carries the protocol version and client capabilities (-32602); when it
     does not and the header names a version we do not serve, the answer is step 5's (a
     client of another revision may shape `_meta` otherwise, and the version is its fault);
  4. each of `MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name` appears at most once and matches
     the body; values may use the `=?base64?...?=` form (-32020);
  5. the version is one we serve (-32022 with the supported list, in `data` and in words).

In every era, `Mcp-Method` and `Mcp-Name`, when present, appear once and match the body
(-32020), as in step 4: a proxy in front (`make cluster`'s HAProxy retries what these headers
say is a read) acts on them, so what it acts on is what the bridge checked (docs/operations.md,
"What a proxy acts on"). A legacy client need not send them; one that does is held to them.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass, field
from typing import Any, Final, TypeGuard

from mcp_types import jsonrpc
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS

MODERN: Final = tuple(MODERN_PROTOCOL_VERSIONS)
LEGACY: Final = tuple(v for v in HANDSHAKE_PROTOCOL_VERSIONS if v >= "2025-03-26")
LEGACY_DEFAULT: Final = "2025-03-26"
META_VERSION: Final = "io.modelcontextprotocol/protocolVersion"
META_CAPABILITIES: Final = "io.modelcontextprotocol/clientCapabilities"
H_VERSION: Final = "mcp-protocol-version"
H_METHOD: Final = "mcp-method"
H_NAME: Final = "mcp-name"
NAME_PARAMS: Final = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}
MAX_ID_CHARS: Final = 256
_B64: Final = re.compile(r"^=\?base64\?(?P<p>.*)\?=$")

HTTP_STATUS: Final = {
    jsonrpc.PARSE_ERROR: 400,
    jsonrpc.INVALID_REQUEST: 400,
    jsonrpc.INVALID_PARAMS: 400,
    jsonrpc.HEADER_MISMATCH: 400,
    jsonrpc.UNSUPPORTED_PROTOCOL_VERSION: 400,
    jsonrpc.METHOD_NOT_FOUND: 404,
}
"""JSON-RPC code -> HTTP status for protocol faults (the SDK's table); others answer 200."""

Headers = dict[str, list[str]]


@dataclass(frozen=True, slots=True)
class Rejection:
    """Answer with HTTP `status` and a JSON-RPC error (`code`, `message`, `data`) for `id`."""

    status: int
    code: int
    message: str
    id: str | int | None = None
    data: Any = None

    def body(self) -> dict[str, Any]:
        """The JSON-RPC error response object."""
        err: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            err["data"] = self.data
        return {"jsonrpc": "2.0", "id": self.id, "error": err}


@dataclass(frozen=True, slots=True)
class Route:
    """A request to dispatch: era (`modern`/`legacy`), version, method, params, id.

    `id` is None for a notification (answer 202 with no body)."""

    era: str
    version: str
    method: str
    params: dict[str, Any] = field(default_factory=dict)
    id: str | int | None = None

    @property
    def is_notification(self) -> bool:
        """True when the message has no id."""
        return self.id is None


def unsupported(requested: str, supported: list[str], rid: str | int | None) -> Rejection:
    """-32022 for `requested`: `data` carries the versions to try (`supported`), and the message
    says in words which revisions this server speaks, and how."""
    shown = requested if len(requested) <= 40 else requested[:40] + "..."
    words = (
        f"Unsupported protocol version {json.dumps(shown)}: this server supports"
        f" {', '.join(MODERN)} (per request, with _meta) and {', '.join(LEGACY)} (after"
        " initialize)"
    )
    data = {"supported": supported, "requested": requested}
    return Rejection(400, jsonrpc.UNSUPPORTED_PROTOCOL_VERSION, words, rid, data)


def decode_header(value: str) -> str | None:
    """A mirrored header's value, decoding the `=?base64?...?=` form; None when malformed."""
    m = _B64.match(value)
    if m is None:
        return value
    payload = m.group("p")
    try:
        raw = base64.b64decode(payload, validate=True)
        if base64.b64encode(raw).decode("ascii") != payload:
            return None
        return raw.decode("utf-8")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None


class JsonRefused(ValueError):
    """Text that Python's `json` would take but that is not the JSON we accept."""


def _no_constant(name: str) -> Any:
    raise JsonRefused(f"{name} is not JSON")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        raise JsonRefused("an object names the same member twice")
    return out


def loads_strict(text: bytes | str) -> Any:
    """Parse JSON as RFC 8259 writes it, and no further.

    Bytes must be UTF-8 (section 8.1; `json.loads` alone also takes UTF-16 and UTF-32).
    `NaN`, `Infinity` and `-Infinity` are refused (section 6 has no such numbers), and so is an
    object that names a member twice (section 4 leaves its meaning open; two parsers that read
    it differently are how a proxy and a server come to disagree).

    Raises:
        ValueError: not JSON by these rules (`json.JSONDecodeError`, `JsonRefused`), or
            `RecursionError` for nesting deeper than the interpreter's stack.
    """
    if isinstance(text, bytes):
        text = text.decode("utf-8")  # UnicodeDecodeError is a ValueError
    if text.startswith("\ufeff"):  # as `json.loads` refuses it
        raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
    return _STRICT.decode(text)


_STRICT: Final = json.JSONDecoder(parse_constant=_no_constant, object_pairs_hook=_no_duplicates)
"""What `json.loads(text, parse_constant=..., object_pairs_hook=...)` builds at every call,
made once (`loads_strict`)."""


def _parse(body: bytes) -> Any | Rejection:
    try:
        return loads_strict(body)
    except (ValueError, RecursionError):
        return Rejection(400, jsonrpc.PARSE_ERROR, "Parse error")


def _is_text(v: Any) -> TypeGuard[str]:
    """Text that is valid Unicode (no lone surrogates from escapes such as `\\ud800`)."""
    if not isinstance(v, str):
        return False
    try:
        v.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _valid_id(v: Any) -> bool:
    if isinstance(v, bool):
        return False
    if isinstance(v, int):
        return -(2**53) < v < 2**53
    return _is_text(v) and len(v) <= MAX_ID_CHARS


def _message(msg: Any) -> tuple[str, dict[str, Any], str | int | None] | Rejection:
    if not isinstance(msg, dict):
        text = "Batches are not supported" if isinstance(msg, list) else "Invalid request"
        return Rejection(400, jsonrpc.INVALID_REQUEST, text)
    rid = msg.get("id")
    has_id = "id" in msg
    good_id = _valid_id(rid) if has_id else True
    echo = rid if has_id and good_id else None
    method = msg.get("method")
    params = msg.get("params", {})
    if msg.get("jsonrpc") != "2.0" or not _is_text(method) or not good_id:
        return Rejection(400, jsonrpc.INVALID_REQUEST, "Invalid request", echo)
    if not isinstance(params, dict):
        return Rejection(400, jsonrpc.INVALID_PARAMS, "params must be an object", echo)
    return method, params, rid if has_id else None


def _one(headers: Headers, name: str) -> tuple[str | None, bool]:
    values = headers.get(name, [])
    return (values[0] if values else None), len(values) > 1


def classify(headers: Headers, body: bytes) -> Route | Rejection:
    """Classify one POST body with its headers (lower-case names, every value kept)."""
    parsed = _parse(body)
    if isinstance(parsed, Rejection):
        return parsed
    shape = _message(parsed)
    if isinstance(shape, Rejection):
        return shape
    method, params, rid = shape
    version, repeated = _one(headers, H_VERSION)
    if version is None or version in HANDSHAKE_PROTOCOL_VERSIONS:
        if repeated:
            msg = f"{H_VERSION} header appears more than once"
            return Rejection(400, jsonrpc.HEADER_MISMATCH, msg, rid)
        version = version or LEGACY_DEFAULT
        if version not in LEGACY:
            return unsupported(version, [*LEGACY, *MODERN], rid)
        mismatch = _mirrors(headers, method, params, rid, required=False)
        if mismatch is not None:
            return mismatch
        return Route("legacy", version, method, params, rid)
    return _modern(headers, method, params, rid, version, repeated)


def _mirrors(
    headers: Headers,
    method: str,
    params: dict[str, Any],
    rid: str | int | None,
    *,
    required: bool,
) -> Rejection | None:
    """Whether `Mcp-Method` and `Mcp-Name` mirror the body: each at most once and equal to the
    method and its name (`NAME_PARAMS`) when present; with `required` (2026-07-28), both must
    be there (the name when the body has one). None when they agree."""
    for name in (H_METHOD, H_NAME):
        if len(headers.get(name, [])) > 1:
            msg = f"{name} header appears more than once"
            return Rejection(400, jsonrpc.HEADER_MISMATCH, msg, rid)
    header_method, _ = _one(headers, H_METHOD)
    if (header_method is not None or required) and (
        header_method is None or decode_header(header_method) != method
    ):
        return Rejection(
            400, jsonrpc.HEADER_MISMATCH, "Mcp-Method header does not match the body's method", rid
        )
    header_name, _ = _one(headers, H_NAME)
    name_key = NAME_PARAMS.get(method)
    if name_key is None or name_key not in params or (header_name is None and not required):
        return None
    if header_name is None or decode_header(header_name) != params[name_key]:
        msg = f"Mcp-Name header does not match params.{name_key}"
        return Rejection(400, jsonrpc.HEADER_MISMATCH, msg, rid)
    return None


def _modern(
    headers: Headers,
    method: str,
    params: dict[str, Any],
    rid: str | int | None,
    version: str,
    repeated: bool,
) -> Route | Rejection:
    if rid is None:  # a notification: only the version header is checked
        if version not in MODERN:
            return unsupported(version, list(MODERN), None)
        return Route("modern", version, method, params, None)
    for name in (H_VERSION, H_METHOD, H_NAME):
        if len(headers.get(name, [])) > 1 or (name == H_VERSION and repeated):
            return Rejection(
                400, jsonrpc.HEADER_MISMATCH, f"{name} header appears more than once", rid
            )
    meta = params.get("_meta")
    if not isinstance(meta, dict) or META_VERSION not in meta or META_CAPABILITIES not in meta:
        named = decode_header(version)
        if named not in MODERN:
            return unsupported(version if named is None else named, list(MODERN), rid)
        return Rejection(
            400,
            jsonrpc.INVALID_PARAMS,
            f"params._meta must carry {META_VERSION!r} and {META_CAPABILITIES!r}",
            rid,
        )
    body_version = meta[META_VERSION]
    if not isinstance(body_version, str):
        return Rejection(400, jsonrpc.INVALID_PARAMS, "protocol version must be text", rid)
    if decode_header(version) != body_version:
        return Rejection(
            400, jsonrpc.HEADER_MISMATCH, "MCP-Protocol-Version header does not match _meta", rid
        )
    mismatch = _mirrors(headers, method, params, rid, required=True)
    if mismatch is not None:
        return mismatch
    if body_version not in MODERN:
        return unsupported(body_version, list(MODERN), rid)
    return Route("modern", body_version, method, params, rid)
