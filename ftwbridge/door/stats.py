"""The door's counters, shared by its uplinks (`door.py`) and its rosters (`rosters.py`)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class DoorStats:
    """Counters (they only grow): tunnels dropped past the limits each way, uplinks taken
    over, rosters and uplinks refused (totals, and by code or reason), home keys changed."""

    dropped_from_box: int = 0
    dropped_to_box: int = 0
    takeovers: int = 0
    rosters_refused: int = 0
    uplinks_refused: int = 0
    rosters_refused_by: dict[str, int] = field(default_factory=dict)
    """Rosters refused by code (`RosterProblem` values)."""
    uplinks_refused_by: dict[str, int] = field(default_factory=dict)
    """Uplinks refused by reason: `unknown_home`, `bad_signature`, `no_hello`."""
    home_key_changes: int = 0
