"""The stub home's garage: charger "lp1", cars "car1" and "car2", and what control changed.

Pure: every function takes the wall clock `now_ms` (ms since the Unix epoch). Without control
the garage follows the home's schedule (`stubbox.home`): "lp1" charges "car1" at 7.4 kW from
01:00 to 05:00 UTC (the owner's planner holds it then), "car1" is away 08:00-17:30.

`Controls` is what commands and the owner's decisions change (PROTOCOL.md part E): holds per
charger, the cars' targets, the site's mode, the dispatch gate and `controlRev`, which moves
with each change (a hold set, released or run out, a mode or target set). A held charger
follows its hold the way a real one does: it draws whole amps on three phases, between 6 A and
16 A (4,140 to 11,040 W), so the power it draws is rarely the power asked, and it draws nothing
while no car is plugged in; a hold ends at its `untilMs`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

from .physics import DAY_MS, EV_W, HOUR_MS
from .settings import MODE

LOADPOINT: Final = "lp1"
CARS: Final = ("car1", "car2")
CAR1_CAPACITY_WH: Final = 75_000
"""The usable battery of "car1" in Wh, as its box reports it in `cars` (`capacity_wh`)."""
W_PER_A: Final = 690
"""Watts per amp on three phases at 230 V."""
MIN_A: Final = 6
MAX_A: Final = 16
OWNER: Final = "owner"
"""`Hold.by` of the owner's own holds (the planner's night charge, the owner's app)."""


def drawn_w(asked_w: int, plugged: bool) -> int:
    """What the charger draws (W) when held at `asked_w`: whole amps on three phases from 6 A
    to 16 A (the nearest below the asked power, at least 6 A), or 0 with no car plugged."""
    if not plugged:
        return 0
    return min(max(asked_w // W_PER_A, MIN_A), MAX_A) * W_PER_A


@dataclass(frozen=True, slots=True)
class Hold:
    """A hold on a charger: asked power (W), end (wall ms; None: no end), who set it (an
    agent's key in hex, or `OWNER`), and the lease id its `cmd.ack` gave."""

    power_w: int
    until_ms: int | None
    by: str
    lease_id: str = ""


def _hour(now_ms: int) -> float:
    return (now_ms % DAY_MS) / HOUR_MS


def plugged(car: str, now_ms: int) -> bool:
    """Whether `car` is plugged in at "lp1": "car1" unless away (08:00-17:30), never "car2"."""
    return car == "car1" and not 8 <= _hour(now_ms) < 17.5


def _schedule_hold(now_ms: int) -> Hold | None:
    """The planner's night charge, 01:00-05:00, as the owner's hold."""
    if not 1 <= _hour(now_ms) < 5:
        return None
    day_start = now_ms - now_ms % DAY_MS
    return Hold(EV_W, day_start + 5 * HOUR_MS, OWNER)


@dataclass(slots=True)
class Controls:
    """What control changed at the home (module docstring); `rev` is `controlRev`."""

    rev: int = 1
    mode: str = MODE
    blocked_by: list[str] = field(default_factory=list)
    holds: dict[str, Hold] = field(default_factory=dict)
    targets: dict[str, int] = field(default_factory=lambda: {"car1": 800})

    def bump(self) -> int:
        """Move `controlRev` on; returns the new value."""
        self.rev += 1
        return self.rev

    def hold(self, charger: str, now_ms: int) -> Hold | None:
        """The hold on `charger` at `now_ms`: a set one until its end (a hold that has run out
        is dropped and moves `controlRev`), else the planner's night charge."""
        held = self.holds.get(charger)
        if held is not None and held.until_ms is not None and now_ms >= held.until_ms:
            del self.holds[charger]
            self.bump()
            held = None
        return held if held is not None else _schedule_hold(now_ms)

    def set_hold(self, charger: str, hold: Hold) -> None:
        """Hold `charger` (replacing any hold on it)."""
        self.holds[charger] = hold
        self.bump()

    def release(self, charger: str) -> None:
        """End the set hold on `charger`; it goes back to its schedule."""
        if self.holds.pop(charger, None) is not None:
            self.bump()

    def set_mode(self, mode: str) -> None:
        """Run the site in `mode` (a key of registry.yaml `modes`)."""
        self.mode = mode
        self.bump()

    def set_target(self, car: str, soc_permille: int) -> None:
        """Charge `car` to `soc_permille` (permille)."""
        self.targets[car] = soc_permille
        self.bump()

    def ev_w(self, now_ms: int) -> int | None:
        """What "lp1" draws under a set hold (W), or None when no set hold is active."""
        self.hold(LOADPOINT, now_ms)  # drops a hold that has run out
        held = self.holds.get(LOADPOINT)
        return None if held is None else drawn_w(held.power_w, plugged("car1", now_ms))


def car1_soc(now_ms: int) -> int:
    """Family car's state of charge, permille (charged 01:00-05:00, driven 08:00 on)."""
    h = _hour(now_ms)
    if h < 1:
        return 400
    if h < 5:
        return round(400 + 395 * (h - 1) / 4)
    if h < 8:
        return 795
    return round(795 - 395 * (h - 8) / 16)


def loadpoints(controls: Controls, name: str, now_ms: int) -> dict[str, Any]:
    """The `loadpoints` answer (agents.yaml `answers`) plus `controlRev` (part E: the bridge
    reads it before its first command): "lp1"; W, Wh charged since 01:00, wall-clock `untilMs`.
    `power_w` is what the charger draws; `hold.power_w` what the hold asks."""
    h = _hour(now_ms)
    held = controls.hold(LOADPOINT, now_ms)
    away = not plugged("car1", now_ms)
    power = 0 if held is None else drawn_w(held.power_w, not away)
    if held is not None and held.by == OWNER and LOADPOINT not in controls.holds:
        power = EV_W  # the planner's night charge, as the home's physics has it
    state = "charging" if power > 0 else "idle" if away else "connected"
    hold = None if held is None else {"power_w": held.power_w, "untilMs": held.until_ms}
    return {
        "loadpoints": [
            {
                "id": LOADPOINT,
                "name": name,
                "state": state,
                "power_w": power,
                "session_wh": 0 if away else round(EV_W * min(max(h - 1, 0.0), 4.0)),
                "car": None if away else "car1",
                "mode": "pv",
                "hold": hold,
            }
        ],
        "controlRev": controls.rev,
    }


def cars(controls: Controls, names: tuple[str, str], car2_soc: int, now_ms: int) -> dict[str, Any]:
    """The `cars` answer: permille, km; "car1" plugged unless away, "car2" never plugged; the
    targets are the owner's (an approved `ev_target` goal sets one). `capacity_wh` is the usable
    battery in Wh: "car1" has a known 75 kWh, "car2" none (a box that does not know it says null,
    agents.yaml `cars`)."""
    soc1 = car1_soc(now_ms)
    return {
        "cars": [
            {
                "id": "car1",
                "name": names[0],
                "soc_permille": soc1,
                "range_km": round(soc1 * 75 / 180),
                "plugged": plugged("car1", now_ms),
                "target_soc_permille": controls.targets.get("car1"),
                "capacity_wh": CAR1_CAPACITY_WH,
            },
            {
                "id": "car2",
                "name": names[1],
                "soc_permille": car2_soc,
                "range_km": round(car2_soc * 58 / 170),
                "plugged": False,
                "target_soc_permille": controls.targets.get("car2"),
                "capacity_wh": None,
            },
        ]
    }
