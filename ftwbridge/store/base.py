"""The store's interface: what the bridge keeps, whatever database keeps it."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class TokenRecord:
    """An access token's binding (the token itself is never stored, only its SHA-256).

    `agent_key` is the agent's Noise static public key (32 bytes); times in ms since the epoch.
    """

    home: str
    agent_id: str
    agent_key: bytes
    scopes: tuple[str, ...]
    resource: str
    client: str
    expires_at_ms: int
    withdrawn: bool = False
    """The home's owner dropped the agent: the token is kept (until it expires) only so the
    bridge can say why it no longer works."""


class Store(Protocol):
    """Async persistence for homes, rosters and tokens."""

    async def enroll_home(self, home: str, public_key: bytes) -> None:
        """Record (or replace) a home's Ed25519 public key (32 bytes)."""

    async def home_key(self, home: str) -> bytes | None:
        """A home's Ed25519 public key, or None for an unknown home."""

    async def home_keys(self, homes: Collection[str]) -> dict[str, bytes]:
        """The Ed25519 public keys of those of `homes` that are enrolled (home -> 32 bytes)."""

    async def write_mark(self) -> int:
        """A number that differs from the one the previous call returned when another process
        has written the store since (SQLite: `PRAGMA data_version`). The bridge polls it to
        notice `ftwbridge home enroll` run beside it."""

    async def put_roster(self, home: str, seq: int, signed: bytes) -> None:
        """Keep `signed` as the home's newest roster (the caller has verified it)."""

    async def roster(self, home: str) -> tuple[int, bytes] | None:
        """The home's newest (seq, SignedRoster bytes), or None."""

    async def put_token(self, token_hash: bytes, record: TokenRecord) -> None:
        """Keep a token's binding under its SHA-256 (32 bytes)."""

    async def token(self, token_hash: bytes) -> TokenRecord | None:
        """The binding of a token hash, or None."""

    async def drop_agent_tokens(self, home: str, agent_key: bytes) -> int:
        """Delete every token of one agent at one home; returns how many."""

    async def withdraw_agent_tokens(self, home: str, agent_key: bytes) -> int:
        """Mark every token of one agent at one home withdrawn (a roster dropped the agent);
        returns how many."""
