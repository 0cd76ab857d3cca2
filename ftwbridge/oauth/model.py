"""OAuth's data: errors in the RFC 6749 shape, consent requests, codes, and small checks."""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol
from urllib.parse import unquote_plus, urlencode, urlsplit

from .redirects import MAX_URI_CHARS as MAX_URI_CHARS

CODE_TTL_MS = 60_000
REQUEST_TTL_MS = 600_000
CLIENT_TTL_MS = 86_400_000
REFRESH_TTL_MS = 30 * 86_400_000
GRANT_TTL_MS = 90 * 86_400_000
MAX_CLAIM_TRIES = 5
MAX_NAME_CHARS = 100
MAX_REDIRECT_URIS = 8
MAX_PENDING = 10_000
"""Consent requests open at once (memory bound); past it the source holding the most loses its
oldest (`shedding.to_shed`), so a first request always gets in."""
MAX_STATE_CHARS = 512
USED_CODE_KEEP_MS = 600_000
"""A used code is remembered 10 minutes past its expiry so a replay still revokes its tokens."""
GUESS_BURST = 30
GUESS_PER_S = 0.5
"""Wrong claim codes allowed across all consent requests: 30, then one every 2 s."""
REGISTER_BURST = 60
REGISTER_PER_S = 1.0
"""Client registrations allowed per process: 60, then one per second."""
REGISTER_ADDRESS_BURST = 20
REGISTER_ADDRESS_PER_S = 0.1
"""Client registrations allowed per client address: 20, then one every 10 s."""
START_ADDRESS_BURST = 60
START_ADDRESS_PER_S = 1.0
"""Consent requests opened per client address: 60, then one a second."""
GUESS_ADDRESS_BURST = 10
GUESS_ADDRESS_PER_S = 0.1
"""Wrong claim codes per client address: 10, then one every 10 s (below the process's 30, so
one address cannot use up everyone's guesses)."""
GUESS_SHARE_BURST = 3
GUESS_SHARE_PER_S = 0.03
"""Wrong claim codes per client address while the limit for everyone is spent: 3, then one
every 33 s. A source that has not guessed lately is always heard (its code is checked), while
the heaviest guessers are refused first (docs/auth.md, "Limits that strangers cannot fill")."""
REGISTER_SHARE_BURST = 2
REGISTER_SHARE_PER_S = 1 / 60
"""Client registrations per client address while the limit for everyone is spent: 2, then
one a minute, so a first registration from any address gets through however busy others are."""


class OAuthError(Exception):
    """An RFC 6749 error: `error` code, `description`, HTTP `status`, and the sign-in audit's
    `outcome` word when it is not the error code (`oauth.audit.outcome_of`)."""

    def __init__(
        self, error: str, description: str, status: int = 400, *, outcome: str | None = None
    ) -> None:
        super().__init__(description)
        self.error = error
        self.description = description
        self.status = status
        self.outcome = outcome

    def body(self) -> dict[str, str]:
        """The RFC 6749 section 5.2 error object."""
        return {"error": self.error, "error_description": self.description}


class HeldAccess(Protocol):
    """An access token's stored record, as far as the token endpoint reads it."""

    @property
    def expires_at_ms(self) -> int:
        """When the token stops working, ms since the epoch (the bridge's clock)."""
        ...


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
    async def purge_clients(self, now_ms: int) -> None: ...
    async def refresh_record(self, token_hash: bytes, now_ms: int) -> dict[str, Any] | None: ...
    async def token(self, token_hash: bytes) -> HeldAccess | None: ...
    async def put_oauth_state(
        self, kind: str, key: str, record: dict[str, Any], expires_at_ms: int
    ) -> None:
        """Keep (or replace) one item of the sign-in state that must survive a restart, under
        (`kind`, `key`), until `expires_at_ms` (ms since the epoch). Kinds: `consent` (a
        consent request by its id), `code` (an authorization code by its SHA-256 in hex; the
        code itself is never stored), `claim` (a home-claim offer by its code hash in hex).
        `record` is a JSON object (`oauth/persist.py` writes and reads it)."""
        ...

    async def drop_oauth_state(self, kind: str, key: str) -> None:
        """Forget one item (`put_oauth_state`); nothing happens when it is unknown."""
        ...

    async def oauth_states(self, kind: str, now_ms: int) -> list[tuple[str, dict[str, Any], int]]:
        """Every item of `kind` still live at `now_ms`, as (key, record, expires_at_ms), after
        deleting the expired ones of that kind (expiry on load)."""
        ...

    async def oauth_state(
        self, kind: str, key: str, now_ms: int
    ) -> tuple[dict[str, Any], int] | None:
        """One live item (`put_oauth_state`) as (record, expires_at_ms), or None when it is
        unknown or expired at `now_ms` (ms since the epoch)."""
        ...

    async def change_oauth_state(
        self,
        kind: str,
        key: str,
        changes: dict[str, Any],
        now_ms: int,
        *,
        where: dict[str, Any] | None = None,
    ) -> dict[str, Any] | None:
        """Merge `changes` (top-level fields) into a live item's record, atomically, if every
        field of `where` has that value in it now (scalars; JSON containment). Returns the
        record as changed, or None when the item is unknown, expired, or does not match (an
        instance changed it first): the compare-and-set every instance relies on."""
        ...

    async def take_oauth_state(
        self, kind: str, key: str, now_ms: int, *, where: dict[str, Any] | None = None
    ) -> dict[str, Any] | None:
        """Delete an item whose record matches `where` and return its record, atomically: of
        many callers, one gets it (a claim offer used once, a consent request delivered
        once). An expired item is deleted and None returned."""
        ...

    async def find_oauth_states(
        self, kind: str, now_ms: int, where: dict[str, Any]
    ) -> list[tuple[str, dict[str, Any], int]]:
        """Every live item of `kind` whose record matches `where` (scalars), as (key, record,
        expires_at_ms), by key."""
        ...

    async def expire_oauth_states(
        self, kind: str, now_ms: int
    ) -> list[tuple[str, dict[str, Any], int]]:
        """Delete the items of `kind` expired at `now_ms` and return them (key, record,
        expires_at_ms), each to one caller only (its consent's agent key is dropped once)."""
        ...

    async def drop_oauth_states(self, kind: str, where: dict[str, Any]) -> int:
        """Delete every item of `kind` whose record matches `where`; returns how many."""
        ...

    async def count_oauth_states(self, kind: str, now_ms: int) -> int:
        """How many items of `kind` are live at `now_ms` (ms since the epoch): the open
        consent requests of every instance, for `MAX_PENDING`."""
        ...


IssueAccess = Callable[[str, bytes, str, tuple[str, ...], str], Awaitable[str]]


class ConsentStatus(StrEnum):
    """Where a consent request stands (docs/auth.md, "The flow"). It starts `NEW` (the consent
    page is shown); a claim code the home's box accepts makes it `ASKED` (the owner is asked at
    home: `agent.request`, PROTOCOL.md part C); the owner's answer makes it `APPROVED` or
    `DENIED`; too many wrong claim codes, or a box that cannot be asked, make it `FAILED`.
    `APPROVED` ends with the code delivered, `DENIED` and `FAILED` with `access_denied`.
    The values are the words written in the store's records and the audit line."""

    NEW = "new"
    ASKED = "asked"
    APPROVED = "approved"
    DENIED = "denied"
    FAILED = "failed"


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
    status: str = ConsentStatus.NEW
    """A `ConsentStatus` (annotated `str` while oauth/service.py still assigns the words)."""
    code: str | None = None
    """The authorization code, once `OAuthService.deliver` made it (never stored)."""
    redirect_given: bool = True
    """Whether `/authorize` named `redirect_uri` (then `/oauth/token` must name it too)."""
    saved_status: str = ""
    """The status last written to the store (`persist`); another status is written on read."""
    source: str = ""
    """The client address key that opened it (`limits.client_address`), for the shedding of a
    full bridge (`shedding.to_shed`)."""

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
    """An issued code: its consent request, expiry, whether used, and what it gave."""

    pending: Pending
    expires_at_ms: int
    used: bool = False
    issued: list[bytes] = field(default_factory=list)
    family: str = ""
    replayed: bool = False
    """Presented again after its use: what it gave is revoked, and a redeemer still minting
    revokes its own tokens too (`TokenGrants._exchange`)."""


def valid_challenge(challenge: str) -> bool:
    """An S256 code challenge: 43 base64url characters (RFC 7636 section 4.2)."""
    return re.fullmatch(r"[A-Za-z0-9_-]{43}", challenge) is not None


def valid_verifier(verifier: str) -> bool:
    """A PKCE code verifier: 43 to 128 unreserved characters (RFC 7636 section 4.1)."""
    return re.fullmatch(r"[A-Za-z0-9\-._~]{43,128}", verifier) is not None


def present(params: dict[str, Any]) -> dict[str, Any]:
    """`params` without the ones sent with no value (`""` or JSON null): RFC 6749 section 3.1
    says a parameter sent without a value MUST be treated as omitted. Unknown parameters are
    kept here and ignored by their readers (RFC 6749 section 3.1)."""
    return {k: v for k, v in params.items() if v is not None and v != ""}


def with_basic_client(form: dict[str, str], authorization: str | None) -> dict[str, str]:
    """`form` with `client_id` taken from an `Authorization: Basic` header when the body has
    none: a client that registered `client_secret_basic` and was answered `none` may still
    send its id there (RFC 6749 section 2.3.1: the id is form-urlencoded, then base64 with the
    secret, which is ignored). An unreadable header is ignored like any unknown input.

    Raises:
        OAuthError: `invalid_request` when the body and the header name different clients.
    """
    if not authorization or authorization[:6].lower() != "basic ":
        return form
    try:
        raw = base64.b64decode(authorization[6:].strip(), validate=True).decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        return form
    client_id = unquote_plus(raw.split(":", 1)[0])
    if not client_id:
        return form
    if form.get("client_id") not in (None, "", client_id):
        raise OAuthError("invalid_request", "client_id differs between the body and the header")
    return form | {"client_id": client_id}


def cut_text(value: Any, limit: int) -> str:
    """`value` if it is text, cut to `limit` characters; else the empty string."""
    return value[:limit] if isinstance(value, str) else ""


def s256(verifier: str) -> str:
    """The PKCE S256 challenge of `verifier` (RFC 7636 section 4.2)."""
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")
