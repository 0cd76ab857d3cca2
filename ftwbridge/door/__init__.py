"""The door: boxes' uplinks at `/v1/box`, tunnel carriage and per-home limits (PROTOCOL.md part C)."""

from .door import Door, DoorStats
from .tunnel import HomeOffline, Tun, TunEnded, WebSocketLike

__all__ = ["Door", "DoorStats", "HomeOffline", "Tun", "TunEnded", "WebSocketLike"]
