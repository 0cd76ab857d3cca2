"""The stub home's meter, second by second: seeded wiggles on the 5-minute slots of the physics.

A real box's meter moves every second: household load flickers, PV moves under clouds and the
grid balance follows. `stubbox.physics` holds every power constant over a 5-minute slot (a
history tile, the meters' unit); `Flicker.at` adds small, seeded, bounded wiggles that change on
whole wall-clock seconds and leave each slot's mean exactly as the physics says, so the history,
the plan and the meters (PROTOCOL.md part G) are unchanged and still equal the readings summed
over the slot's 300 seconds. Pure: no clock reads, no I/O; the wiggles of a slot are a function
of a 32-byte key, the home's identity and the slot number, so equal seeds repeat.

Units W and permille, site sign (grid positive = import, battery positive = charging). In each
slot, for its 300 seconds:

- `load_w` moves by at most `LOAD_PERMILLE` of the slot's load (it is 400 W or more, so it stays
  positive): a sum of sines of 2 to 100 s periods;
- `pv_w` moves by at most `PV_PERMILLE` of the slot's PV, in swings of 25 s to 5 min (clouds);
  0 at night stays 0;
- `ev_w` is the slot's (a charger draws what it is set to), and so is `battery_soc`;
- the balance of the two, `load - pv` wiggles, goes to the grid; or, when the slot's battery
  holds the grid at 0 (`grid_w` 0 while `battery_w` is not), to the battery, which follows the
  meter and keeps the grid at 0. `grid_w = load_w + ev_w + battery_w - pv_w` on every reading.

Each wiggle is integers that sum to exactly 0 over the slot. The series that takes up the balance
never changes sign within its slot and the battery never passes `BATTERY_MAX_W`: when the slot's
value is nearer 0 (or the limit) than the wiggles' bound, they are scaled down to fit, and what
they lose comes back as a wiggle load and PV share (the balance stays put; this is when PV about
matches the load with the battery full or resting). So import and export, battery in and out,
counted apart per slot from the slot's mean, equal the seconds' own positive and negative parts
summed.
"""

from __future__ import annotations

import hashlib
import math
import random
from dataclasses import dataclass
from typing import Final

from .physics import BATTERY_MAX_W, DAY_MS, SLOT_MS, Physics

SLOT_S: Final = SLOT_MS // 1000
"""Seconds in a slot (300): a reading holds for one wall-clock second."""
LOAD_PERMILLE: Final = 30
"""The most household load moves from its slot's value, permille of it."""
PV_PERMILLE: Final = 60
"""The most PV moves from its slot's value, permille of it."""
_HALF_STEPS: Final = 2 * SLOT_S
_SINE: Final = tuple(math.sin(2 * math.pi * j / _HALF_STEPS) for j in range(_HALF_STEPS))
_LOAD_CYCLES: Final = range(3, SLOT_S // 2)  # periods of 100 s down to about 2 s
_PV_CYCLES: Final = range(1, 13)  # periods of 5 min down to 25 s
_CACHED_SLOTS: Final = 4


@dataclass(frozen=True, slots=True)
class _Slot:
    """One slot's wiggles: per second, W added to load and PV; who takes up the balance."""

    load: tuple[int, ...]
    pv: tuple[int, ...]
    battery_follows: bool


def wiggle(rng: random.Random, bound: int, cycles: range, parts: int) -> tuple[int, ...]:
    """`SLOT_S` integers (W) that sum to exactly 0, each within +-`bound`.

    A sum of `parts` sines, each a whole number of cycles per slot (drawn from `cycles`, so each
    sums to 0 over the slot), with random phases and weights summing to `bound - 1`, sampled at
    each second's middle and rounded by largest remainder so the integers keep the sum 0.
    """
    if bound <= 1:
        return (0,) * SLOT_S
    weights = [0.2 + rng.random() for _ in range(parts)]
    scale = (bound - 1) / sum(weights)
    waves = [(w * scale, rng.choice(cycles), rng.randrange(_HALF_STEPS)) for w in weights]
    exact = [
        sum(a * _SINE[(k * (2 * s + 1) + ph) % _HALF_STEPS] for a, k, ph in waves)
        for s in range(SLOT_S)
    ]
    out = [math.floor(x) for x in exact]
    up = -sum(out)  # how many to round up for the sum to be 0 (0..SLOT_S)
    for s in sorted(range(SLOT_S), key=lambda s: out[s] - exact[s])[:up]:
        out[s] += 1
    return tuple(out)


class Flicker:
    """The home's readings second by second: `Physics.at` plus this module's wiggles.

    Args:
        physics: the home's 5-minute slots.
        key: 32 bytes from the home's seeded generator.
        home_id: the home's identity, so homes that share a simulation seed still flicker apart.
    """

    def __init__(self, physics: Physics, key: bytes, home_id: str = "") -> None:
        self._physics = physics
        self._key = hashlib.blake2b(home_id.encode(), key=key, digest_size=32).digest()
        self._slots: dict[int, _Slot] = {}

    def _slot(self, slot: int) -> _Slot:
        got = self._slots.get(slot)
        if got is not None:
            return got
        d = self._physics.grid(slot * SLOT_MS // DAY_MS)
        k = slot * SLOT_MS % DAY_MS // SLOT_MS
        load, pv, bat = d.load[k], d.pv[k], d.bat[k]
        grid = load + d.ev[k] + bat - pv
        follows = grid == 0 and bat != 0
        room = min(abs(bat), BATTERY_MAX_W - abs(bat)) if follows else abs(grid)
        top_load, top_pv = load * LOAD_PERMILLE // 1000, pv * PV_PERMILLE // 1000
        a_load, a_pv = top_load, top_pv
        if a_load + a_pv > room:  # the balance's taker must keep its sign and limit
            both = a_load + a_pv
            a_load, a_pv = a_load * room // both, a_pv * room // both
        seed = hashlib.blake2b(f"flicker:{slot}".encode(), key=self._key).digest()
        rng = random.Random(seed)
        dl = wiggle(rng, a_load, _LOAD_CYCLES, 6)
        dp = wiggle(rng, a_pv, _PV_CYCLES, 4)
        # What the taker had no room for: load and PV move together, the balance stays put.
        both_move = wiggle(rng, min(top_load - a_load, top_pv - a_pv), _PV_CYCLES, 4)
        if any(both_move):
            dl = tuple(x + c for x, c in zip(dl, both_move, strict=True))
            dp = tuple(x + c for x, c in zip(dp, both_move, strict=True))
        out = _Slot(dl, dp, follows)
        if len(self._slots) >= _CACHED_SLOTS:
            self._slots.clear()
        self._slots[slot] = out
        return out

    def at(self, t_ms: int) -> dict[str, int]:
        """The six series at wall-clock `t_ms` (ms since the epoch), as `Physics.at` names them:
        W, and `battery_soc` in permille; constant over each wall-clock second."""
        f = self._physics.at(t_ms)
        w = self._slot(t_ms // SLOT_MS)
        s = t_ms % SLOT_MS // 1000
        dl, dp = w.load[s], w.pv[s]
        f["load_w"] += dl
        f["pv_w"] += dp
        if w.battery_follows:
            f["battery_w"] -= dl - dp
        else:
            f["grid_w"] += dl - dp
        return f
