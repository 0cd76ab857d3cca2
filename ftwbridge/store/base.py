"""The store's interface: what the bridge keeps, whatever database keeps it."""

from __future__ import annotations

import hashlib
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, Protocol


def hash_token(token: str) -> bytes:
    """SHA-256 (32 bytes) of a token's or an authorization code's text, UTF-8: the only form in
    which the store keeps them, and the one hash of a token in the bridge (OAuth, `/mcp`'s
    bearer check and the mesh all call this one)."""
    return hashlib.sha256(token.encode("utf-8")).digest()


class StoreError(Exception):
    """The store cannot be used: its database cannot be reached, refuses the connection, or a
    query failed on the way (PostgreSQL down or restarting, a wrong `database_url`). The
    message is one sentence naming the database (never its password) and what went wrong."""


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


class BridgeStore(Store, Protocol):
    """Everything one bridge process keeps: `Store` (homes, rosters, access tokens) plus the
    OAuth state (`ftwbridge.oauth.model.OAuthStore`: registered clients, refresh tokens, sign-in
    state), and
    the store's own lifetime. `SqliteStore` and `PgStore` both are one."""

    async def start(self) -> list[str]:
        """Connect and bring the schema up to date; returns the names of the migrations it
        applied (none for SQLite, whose schema is made at open).

        Raises:
            StoreError: the database cannot be reached or migrated.
        """

    def close(self) -> None:
        """Release the database (connections, file); the store is not used after."""

    async def put_client(
        self, client_id: str, metadata: dict[str, Any], expires_at_ms: int
    ) -> None:
        """Keep a registered OAuth client (RFC 7591) until `expires_at_ms`."""

    async def client(self, client_id: str, now_ms: int) -> dict[str, Any] | None:
        """A registered client's metadata, or None when unknown or expired."""

    async def purge_clients(self, now_ms: int) -> None:
        """Delete expired client registrations."""

    async def refresh_record(self, token_hash: bytes, now_ms: int) -> dict[str, Any] | None:
        """A live refresh token's record, without using it."""

    async def put_refresh(
        self, token_hash: bytes, family: str, record: dict[str, Any], expires_at_ms: int
    ) -> None:
        """Keep a refresh token's hash in its rotation family (RFC 9700 section 4.14.2)."""

    async def use_refresh(
        self, token_hash: bytes, now_ms: int
    ) -> tuple[str, bool, dict[str, Any]] | None:
        """Mark a live refresh token used, atomically; returns (family, whether it was already
        used, record), or None for an unknown or expired one."""

    async def drop_family(self, family: str) -> None:
        """Revoke a whole refresh-token family."""

    async def drop_token(self, token_hash: bytes) -> int:
        """Delete one access token by its hash; returns how many rows went (0 or 1)."""

    async def drop_refresh_of_agent(self, home: str, agent_key: bytes) -> None:
        """Revoke every refresh token of one agent at one home."""

    async def put_oauth_state(
        self, kind: str, key: str, record: dict[str, Any], expires_at_ms: int
    ) -> None:
        """Keep one item of sign-in state that must survive a restart (a pending consent, an
        authorization code, a claim offer: `kind`) until `expires_at_ms`."""

    async def drop_oauth_state(self, kind: str, key: str) -> None:
        """Forget one item of sign-in state; nothing happens when it is unknown."""

    async def oauth_states(self, kind: str, now_ms: int) -> list[tuple[str, dict[str, Any], int]]:
        """Every item of `kind` live at `now_ms` as (key, record, expires_at_ms), after deleting
        the expired ones of that kind (expiry on load)."""

    async def oauth_state(
        self, kind: str, key: str, now_ms: int
    ) -> tuple[dict[str, Any], int] | None:
        """One live item of sign-in state as (record, expires_at_ms), or None."""

    async def change_oauth_state(
        self,
        kind: str,
        key: str,
        changes: dict[str, Any],
        now_ms: int,
        *,
        where: dict[str, Any] | None = None,
    ) -> dict[str, Any] | None:
        """Merge `changes` into a live item's record if it matches `where`, atomically
        (`OAuthStore.change_oauth_state`); the changed record, or None."""

    async def take_oauth_state(
        self, kind: str, key: str, now_ms: int, *, where: dict[str, Any] | None = None
    ) -> dict[str, Any] | None:
        """Delete a matching item and return its record if it was live, atomically."""

    async def find_oauth_states(
        self, kind: str, now_ms: int, where: dict[str, Any]
    ) -> list[tuple[str, dict[str, Any], int]]:
        """The live items of `kind` whose records match `where`."""

    async def expire_oauth_states(
        self, kind: str, now_ms: int
    ) -> list[tuple[str, dict[str, Any], int]]:
        """Delete and return the expired items of `kind`."""

    async def drop_oauth_states(self, kind: str, where: dict[str, Any]) -> int:
        """Delete the items of `kind` whose records match `where`; returns how many."""

    async def count_oauth_states(self, kind: str, now_ms: int) -> int:
        """How many items of `kind` are live at `now_ms`."""
