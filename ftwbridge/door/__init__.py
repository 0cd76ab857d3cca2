"""The door (PROTOCOL.md part C): boxes' uplinks at `/v1/box`, tunnel carriage and per-home
limits (`door.py`), and the homes' keys and rosters (`rosters.py`)."""

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
