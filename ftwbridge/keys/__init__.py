"""The keys part: the only holder of agents' Noise static keys (PROTOCOL.md, parties)."""

from .service import KeysPort, KeysService
from .wire import KeysClient, serve_keys

__all__ = ["KeysClient", "KeysPort", "KeysService", "serve_keys"]
