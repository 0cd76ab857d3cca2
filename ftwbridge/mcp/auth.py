"""Bearer tokens at `/mcp`: which requests carry a token good for this resource, and the
`WWW-Authenticate` challenges for those that do not (RFC 6750 section 3, RFC 9728 section 5.1)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from ftwbridge.proto.roster import AgentGrant
from ftwbridge.store import TokenRecord


@dataclass(frozen=True, slots=True)
class Unauthorized:
    """A 401 to send: its JSON body and headers (the challenge)."""

    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)


class BearerAuth:
    """Checks the `Authorization` header of `/mcp` requests.

    A token is good when the store knows it (`verify_token`), it is for this resource (RFC 8707
    audience), it has not expired by the bridge's clock, and the home's newest roster still
    lists its agent (`grant`).

    Args:
        verify_token: token text -> its stored record, or None.
        grant: (home, agent key) -> the agent's grant in the newest roster, or None.
        resource: this endpoint's public URL.
        resource_metadata: the URL of the RFC 9728 metadata, named in every challenge.
        wall_ms: the bridge's wall clock, ms since the epoch.
        anonymous_token: the test profile's token for requests without one (never in production).
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
    ) -> None:
        self._verify_token = verify_token
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

    async def authenticate(self, values: list[str]) -> TokenRecord | Unauthorized:
        """The record of the request's bearer token, or the 401 to send (`values`: every
        `Authorization` header of the request; more than one is refused)."""
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
        why = "The access token is not valid"
        if record is not None and record.resource != self._resource:
            record = None
        if record is not None and record.expires_at_ms <= self._wall_ms():
            record, why = None, "The access token has expired; refresh it or sign in again"
        if record is not None and await self._grant(record.home, record.agent_key) is None:
            record = None
            why = "This assistant's access was withdrawn at the home; ask its owner"
        if record is None:
            challenge = self.challenge("invalid_token", why)
            return Unauthorized(
                {"error": "invalid_token", "error_description": why},
                {"www-authenticate": challenge},
            )
        return record
