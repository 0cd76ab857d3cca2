"""OAuth's data: errors in the RFC 6749 shape, consent requests, codes, and small checks."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import urlencode, urlsplit

CODE_TTL_MS = 60_000
REQUEST_TTL_MS = 600_000
CLIENT_TTL_MS = 86_400_000
REFRESH_TTL_MS = 30 * 86_400_000
GRANT_TTL_MS = 90 * 86_400_000
MAX_CLAIM_TRIES = 5
MAX_NAME_CHARS = 100
MAX_URI_CHARS = 512
MAX_REDIRECT_URIS = 8
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "[::1]", "::1"})


class OAuthError(Exception):
    """An RFC 6749 error: `error` code, `description`, HTTP `status`."""

    def __init__(self, error: str, description: str, status: int = 400) -> None:
        super().__init__(description)
        self.error = error
        self.description = description
        self.status = status

    def error_query(self, state: str | None, issuer: str) -> str:
        """`error=...` (with state and iss) for a client's redirect URI's query."""
        params = {"error": self.error, "error_description": self.description, "iss": issuer}
        if state is not None:
            params["state"] = state
        return urlencode(params)

    def body(self) -> dict[str, str]:
        """The RFC 6749 section 5.2 error object."""
        return {"error": self.error, "error_description": self.description}


class OAuthStore(Protocol):
    """What the OAuth logic needs of the store."""

    async def put_client(
        self, client_id: str, metadata: dict[str, Any], expires_at_ms: int
    ) -> None: ...
    async def client(self, client_id: str, now_ms: int) -> dict[str, Any] | None: ...
    async def put_refresh(
        self, token_hash: bytes, family: str, record: dict[str, Any], expires_at_ms: int
    ) -> None: ...
    async def use_refresh(
        self, token_hash: bytes, now_ms: int
    ) -> tuple[str, bool, dict[str, Any]] | None: ...
    async def drop_family(self, family: str) -> None: ...
    async def drop_token(self, token_hash: bytes) -> int: ...
    async def drop_agent_tokens(self, home: str, agent_key: bytes) -> int: ...


IssueAccess = Callable[[str, bytes, str, tuple[str, ...], str], Awaitable[str]]


@dataclass(slots=True, eq=False)
class Pending:
    """One consent request, from `/authorize` until the code is issued or it fails."""

    id: str
    client_id: str
    client_name: str
    redirect_uri: str
    state: str | None
    challenge: str
    scopes: tuple[str, ...]
    csrf: str
    expires_at_ms: int
    tries: int = 0
    home: str | None = None
    agent_key: bytes | None = None
    status: str = "new"  # new | asked | approved | denied | failed
    code: str | None = None

    def redirect(self, issuer: str, **params: str) -> str:
        """The client's redirect URI with `params`, `state` and `iss` (RFC 9207) added."""
        extra = dict(params)
        if self.state is not None:
            extra["state"] = self.state
        extra["iss"] = issuer
        sep = "&" if urlsplit(self.redirect_uri).query else "?"
        return self.redirect_uri + sep + urlencode(extra)


@dataclass(slots=True)
class CodeGrant:
    pending: Pending
    expires_at_ms: int
    used: bool = False
    issued: list[bytes] = field(default_factory=list)
    family: str = ""


def valid_redirect(uri: Any) -> bool:
    if not isinstance(uri, str) or len(uri) > MAX_URI_CHARS or "#" in uri:
        return False
    parts = urlsplit(uri)
    if parts.scheme == "https" and parts.hostname:
        return True
    return parts.scheme == "http" and (parts.hostname or "") in LOOPBACK_HOSTS


def cut_text(value: Any, limit: int) -> str:
    return value[:limit] if isinstance(value, str) else ""


def s256(verifier: str) -> str:
    """The PKCE S256 challenge of `verifier` (RFC 7636 section 4.2)."""
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def token_hash(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8")).digest()
