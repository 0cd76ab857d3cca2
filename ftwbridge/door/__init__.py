"""The door: boxes' uplinks at `/v1/box`, tunnel carriage and per-home limits (PROTOCOL.md part C)."""

from .door import Door
from .stats import DoorStats
from .tunnel import HomeOffline, LocalEnd, Tun, TunEnded, WebSocketLike, tun_end_reason

__all__ = [
    "Door",
    "DoorStats",
    "HomeOffline",
    "LocalEnd",
    "Tun",
    "TunEnded",
    "WebSocketLike",
    "tun_end_reason",
]
