"""The door: boxes' uplinks at `/v1/box`, tunnel carriage and per-home limits (PROTOCOL.md part C)."""

from .door import Door
from .rosters import Rosters
from .stats import DoorStats
from .tunnel import HomeOffline, LocalEnd, Tun, TunEnded, WebSocketLike, tun_end_reason

__all__ = [
    "Door",
    "DoorStats",
    "HomeOffline",
    "LocalEnd",
    "Rosters",
    "Tun",
    "TunEnded",
    "WebSocketLike",
    "tun_end_reason",
]
