"""Homes, their newest rosters, access tokens (hashed) and OAuth state, behind the small
`Store` interface: SQLite in `state_dir` by default, PostgreSQL when `database_url` is set."""

from __future__ import annotations

from pathlib import Path

from .base import BridgeStore, Store, StoreError, TokenRecord, hash_token
from .sqlite import SqliteStore

__all__ = [
    "BridgeStore",
    "SqliteStore",
    "Store",
    "StoreError",
    "TokenRecord",
    "hash_token",
    "open_store",
    "sqlite_path",
]


def sqlite_path(state_dir: Path) -> Path:
    """Where the embedded store keeps its SQLite file in `state_dir`."""
    return Path(state_dir) / "bridge.sqlite"


def open_store(database_url: str | None, state_dir: Path) -> BridgeStore:
    """The store a configuration names: `PgStore` on `database_url` when it is set (not yet
    connected: call `start`), else `SqliteStore` in `state_dir` (created if missing).

    Raises:
        StoreError: `database_url` cannot be read.
        sqlite3.DatabaseError: the SQLite file is damaged.
    """
    if database_url is not None:
        from .postgres import PgStore  # psycopg loads only for a bridge that uses it

        return PgStore(database_url)
    return SqliteStore(sqlite_path(state_dir))
