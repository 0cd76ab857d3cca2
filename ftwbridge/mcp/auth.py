"""Bearer tokens at `/mcp`: minting them (`TokenMinter`), finding their records (`TokenCache`),
which requests carry a token good for this resource, and the `WWW-Authenticate` challenges for
those that do not (RFC 6750 section 3, RFC 9728 section 5.1)."""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable, Container
from dataclasses import dataclass, field, replace
from typing import Any

import trio

from ftwbridge.proto.roster import AgentGrant
from ftwbridge.store import TokenRecord, hash_token

from .affinity import tagged_token
from .control_tools import TOOL_SCOPES

TOKEN_CACHE_S = 30.0
"""How long a token's store record is reused without asking the store again (seconds)."""
TOKEN_CACHE_SIZE = 10_000
"""Records the cache holds at most (the oldest entry goes first)."""


WITHDRAWN = "This assistant's access was withdrawn at the home; ask its owner"
"""The 401's words for a token whose agent the home's roster no longer lists."""
RUN_OUT = "This assistant's access at the home has run out; ask its owner to renew it"
"""The 401's words for a token whose agent's grant has expired (the roster row's expiresAtMs)."""


class TokenMinter:
    """Mints access tokens for `/mcp`; only each token's SHA-256 is stored.

    Args:
        put: stores (token hash, record).
        resource: this endpoint's public URL (the token's audience, RFC 8707), read per mint.
        ttl_s: a token's lifetime in seconds.
        wall_ms: the bridge's wall clock, ms since the epoch.
        tag: home -> the tag its tokens start with, so a balancer can send them to the
            home's holder (`mcp/affinity.py`); None mints untagged tokens (one process).
    """

    def __init__(
        self,
        *,
        put: Callable[[bytes, TokenRecord], Awaitable[None]],
        resource: Callable[[], str],
        ttl_s: int,
        wall_ms: Callable[[], int],
        tag: Callable[[str], str] | None = None,
    ) -> None:
        self._put = put
        self._resource = resource
        self._ttl_s = ttl_s
        self._wall_ms = wall_ms
        self._tag = tag

    async def mint(
        self, home: str, agent_key: bytes, agent_id: str, scopes: tuple[str, ...], client: str
    ) -> str:
        """A new token bound to home, agent, the scopes among `scopes` this resource's tools
        use (`TOOL_SCOPES`) and this resource; returns its text (with `tag`, the home's tag,
        a dot, then 32 random bytes; without, the 32 random bytes: base64url either way)."""
        token = secrets.token_urlsafe(32) if self._tag is None else tagged_token(self._tag(home))
        record = TokenRecord(
            home=home,
            agent_id=agent_id,
            agent_key=agent_key,
            scopes=tuple(s for s in scopes if s in TOOL_SCOPES),
            resource=self._resource(),
            client=client,
            expires_at_ms=self._wall_ms() + self._ttl_s * 1000,
        )
        await self._put(hash_token(token), record)
        return token


class TokenCache:
    """Token records by the token's SHA-256: from memory for `TOKEN_CACHE_S`, else the store.

    The cache only saves the store lookup: expiry, resource and the roster listing the agent
    are checked on every request (`BearerAuth`), and a roster drop evicts the agent's entries.

    Args:
        lookup: token hash -> its stored record, or None.
    """

    def __init__(self, lookup: Callable[[bytes], Awaitable[TokenRecord | None]]) -> None:
        self._lookup = lookup
        self._entries: dict[bytes, tuple[TokenRecord, float]] = {}
        self._generation = 0
        """Bumped by every eviction: a lookup that began before one is not cached."""

    async def verify(self, token: str) -> TokenRecord | None:
        """The record of `token` (its text), or None when the store does not know it."""
        return await self.verify_digest(hash_token(token))

    async def verify_digest(self, digest: bytes) -> TokenRecord | None:
        """The record of the token whose SHA-256 is `digest` (32 bytes), or None."""
        now = trio.current_time()
        hit = self._entries.get(digest)
        if hit is not None and now - hit[1] < TOKEN_CACHE_S:
            return hit[0]
        generation = self._generation
        record = await self._lookup(digest)
        if record is not None and generation == self._generation:
            if len(self._entries) >= TOKEN_CACHE_SIZE:
                self._entries.pop(next(iter(self._entries)))
            self._entries[digest] = (record, now)
        return record

    def forget_unlisted(self, home: str, listed: Container[bytes]) -> None:
        """Evict `home`'s entries whose agent key is not in `listed` (a new roster)."""
        self._generation += 1
        for digest, (record, _at) in list(self._entries.items()):
            if record.home == home and record.agent_key not in listed:
                del self._entries[digest]

    def clear(self) -> None:
        """Evict everything (a token was revoked: RFC 7009)."""
        self._generation += 1
        self._entries.clear()


@dataclass(frozen=True, slots=True)
class Unauthorized:
    """A 401 to send: its JSON body and headers (the challenge)."""

    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)


class BearerAuth:
    """Checks the `Authorization` header of `/mcp` requests.

    A token is good when the store knows it (`verify_token`), it is for this resource (RFC 8707
    audience), it has not expired by the bridge's clock, and the home's newest roster still
    lists its agent (`grant`) with a grant that has not run out. The record returned carries
    only the token's scopes that grant still lists: the scopes copied into a token when it was
    minted never outlast the owner's signed roster. The 401 says which of these
    failed, in words (RFC 6750 section 3.1 `error_description`): a withdrawn agent and a
    grant that ran out each have their own sentence.

    Args:
        verify_token: token text -> its stored record, or None.
        grant: (home, agent key) -> the agent's grant in the newest roster, or None.
        resource: this endpoint's public URL.
        resource_metadata: the URL of the RFC 9728 metadata, named in every challenge.
        wall_ms: the bridge's wall clock, ms since the epoch.
        anonymous_token: the test profile's token for requests without one (never in production).
        verify_digest: a token's SHA-256 (32 bytes) -> its record, or None (forwarded requests).
    """

    def __init__(
        self,
        *,
        verify_token: Callable[[str], Awaitable[TokenRecord | None]],
        grant: Callable[[str, bytes], Awaitable[AgentGrant | None]],
        resource: str,
        resource_metadata: str,
        wall_ms: Callable[[], int],
        anonymous_token: str | None = None,
        verify_digest: Callable[[bytes], Awaitable[TokenRecord | None]] | None = None,
    ) -> None:
        self._verify_token = verify_token
        self._verify_digest = verify_digest
        self._grant = grant
        self._resource = resource
        self._metadata = resource_metadata
        self._wall_ms = wall_ms
        self._anonymous_token = anonymous_token

    def challenge(self, error: str | None, description: str = "", scope: str | None = None) -> str:
        """A `WWW-Authenticate: Bearer` value; `error=None` for a request that sent no
        credentials, which RFC 6750 section 3.1 says gets no error attribute."""
        parts = [] if error is None else [f'error="{error}"', f'error_description="{description}"']
        if scope is not None:
            parts.append(f'scope="{scope}"')
        parts.append(f'resource_metadata="{self._metadata}"')
        return "Bearer " + ", ".join(parts)

    async def authenticate(
        self, values: list[str], *, digest: bytes | None = None
    ) -> TokenRecord | Unauthorized:
        """The record of the request's bearer token, or the 401 to send (`values`: every
        `Authorization` header of the request; more than one is refused). `digest`: the
        token's SHA-256 as another instance forwarded it in place of the token (a signed
        request of the internal listener, docs/operations.md, "Trust across the internal
        hop"); then `values` are not read, and the record is checked in full the same way."""
        if digest is not None:
            found = None if self._verify_digest is None else await self._verify_digest(digest)
            return await self._checked(found)
        if not values and self._anonymous_token is not None:  # the test profile only
            values = [f"Bearer {self._anonymous_token}"]
        if not values:
            return Unauthorized(
                {"error": "unauthorized", "error_description": "Authentication required"},
                {"www-authenticate": self.challenge(None)},
            )
        raw = values[0] if len(values) == 1 else ""
        scheme, _, token = raw.partition(" ")
        record = None
        if scheme.lower() == "bearer" and token.strip():
            record = await self._verify_token(token.strip())
        return await self._checked(record)

    async def _checked(self, record: TokenRecord | None) -> TokenRecord | Unauthorized:
        """`record` (None: no token known) checked for audience, expiry, withdrawal and the
        newest roster's row; the record with the scopes that row grants, or the 401."""
        why = "The access token is not valid"
        if record is not None and record.resource != self._resource:
            record = None
        if record is not None and record.expires_at_ms <= self._wall_ms():
            record, why = None, "The access token has expired; refresh it or sign in again"
        grant = None if record is None else await self._grant(record.home, record.agent_key)
        if record is not None and (record.withdrawn or grant is None):
            record = None
            why = WITHDRAWN
        elif record is not None and grant is not None and grant.expires_at_ms <= self._wall_ms():
            record = None
            why = RUN_OUT
        if record is None or grant is None:
            challenge = self.challenge("invalid_token", why)
            return Unauthorized(
                {"error": "invalid_token", "error_description": why},
                {"www-authenticate": challenge},
            )
        # only signed data decides: the scopes copied into the token when it was minted count
        # only as far as the home's newest verified roster still grants them
        scopes = tuple(s for s in record.scopes if s in grant.scopes)
        return record if scopes == record.scopes else replace(record, scopes=scopes)
