"""Homes, their newest rosters, and access tokens (hashed), behind the small `Store` interface."""

from .base import Store, TokenRecord
from .sqlite import SqliteStore, hash_token

__all__ = ["SqliteStore", "Store", "TokenRecord", "hash_token"]
