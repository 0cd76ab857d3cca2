"""The stub home's meter moves every second, within bounds, and keeps the slots' means exactly.

What `stubbox/flicker.py` promises: small seeded wiggles on each 5-minute slot of the physics
(load within `LOAD_PERMILLE`, PV within `PV_PERMILLE`, the grid or a battery that holds the grid
at 0 taking up the balance), the contract's balance `grid = load + ev + battery - pv` on every
reading (PROTOCOL.md part G's sign convention), and wiggles that sum to 0 over each slot without
turning the grid's or the battery's sign, so history tiles and meters equal the readings summed
second by second. Checked over whole days, at every hour, so none of it depends on when the
tests run.
"""

from __future__ import annotations

import itertools
import random

from stubbox.flicker import LOAD_PERMILLE, PV_PERMILLE, SLOT_S, wiggle
from stubbox.home import Home
from stubbox.meters import BIN, BOUT, EXP, IMP, LOAD, PV
from stubbox.physics import BATTERY_MAX_W, DAY_MS, HOUR_MS, SLOT_MS

DAY0 = 1_755_734_400_000  # 2025-08-21 00:00 UTC
WINTER0 = 1_796_083_200_000  # 2026-12-01 00:00 UTC
POWERS = ("grid_w", "pv_w", "battery_w", "load_w", "ev_w")


def _seconds(home: Home, slot_start: int) -> list[dict[str, int]]:
    return [home.live(slot_start + s * 1000 + 437, 0)["fields"] for s in range(SLOT_S)]


def _slots(day0: int, every: int = 1) -> range:
    return range(day0, day0 + DAY_MS, every * SLOT_MS)


def test_wiggles_sum_to_zero_and_keep_their_bound() -> None:
    rng = random.Random(5)
    for bound in (0, 1, 2, 7, 12, 40, 360):
        for _ in range(40):
            w = wiggle(rng, bound, range(1, 150), rng.randrange(1, 8))
            assert len(w) == SLOT_S and sum(w) == 0
            assert max(abs(x) for x in w) <= bound


def test_readings_move_every_second_at_any_hour() -> None:
    for day0 in (DAY0, WINTER0):
        home = Home(seed=1, home_id="h1")
        for hour in range(24):
            rows = _seconds(home, day0 + hour * HOUR_MS + 600_000)
            moved = sum(a != b for a, b in itertools.pairwise(rows))
            assert moved >= 0.75 * (len(rows) - 1), (day0, hour, moved)


def test_every_second_keeps_the_balance_ranges_and_bounds() -> None:
    home = Home(seed=4, home_id="h4")
    for day0 in (DAY0, WINTER0):
        for start in _slots(day0, every=7):
            slot = home.physics.at(start)
            for s, f in enumerate(_seconds(home, start)):
                assert f["grid_w"] == f["load_w"] + f["ev_w"] + f["battery_w"] - f["pv_w"]
                soc = home.physics.at(start + s * 1000 + 437)["battery_soc"]  # the slot's
                assert 100 <= f["battery_soc"] <= 1000 and f["battery_soc"] == soc
                assert f["ev_w"] == slot["ev_w"] and abs(f["battery_w"]) <= BATTERY_MAX_W
                assert abs(f["load_w"] - slot["load_w"]) <= slot["load_w"] * LOAD_PERMILLE // 1000
                assert abs(f["pv_w"] - slot["pv_w"]) <= slot["pv_w"] * PV_PERMILLE // 1000
                assert f["load_w"] > 0 and f["pv_w"] >= 0
                assert slot["pv_w"] > 0 or f["pv_w"] == 0  # night stays dark


def test_a_slot_of_seconds_sums_to_its_history_tile_and_its_meters() -> None:
    """Per slot, each power summed over its 300 seconds is 300 times the 5-minute tile, and the
    meters' import, export, battery in and out are the seconds' own parts summed (W x s)."""
    home = Home(seed=2, home_id="h2")
    for day0 in (DAY0, WINTER0):
        for start in _slots(day0, every=5):
            rows = _seconds(home, start)
            for name in POWERS:
                tile = home.series_value(name, start, SLOT_MS)
                assert sum(f[name] for f in rows) == SLOT_S * tile, (start, name)
            sums, covered = home.meters.sums(start, start + SLOT_MS)
            if not covered:
                continue
            parts = {
                IMP: sum(max(f["grid_w"], 0) for f in rows),
                EXP: sum(max(-f["grid_w"], 0) for f in rows),
                BIN: sum(max(f["battery_w"], 0) for f in rows),
                BOUT: sum(max(-f["battery_w"], 0) for f in rows),
                PV: sum(f["pv_w"] for f in rows),
                LOAD: sum(f["load_w"] for f in rows),
            }
            assert {i: SLOT_S * sums[i] for i in parts} == parts, start


def test_seeded_per_home_still_on_request_and_constant_within_a_second() -> None:
    t = DAY0 + 12 * HOUR_MS + 123_000
    a, b = Home(seed=3, home_id="h1"), Home(seed=3, home_id="h1")
    assert [a.live(t + s * 1000, 0) for s in range(20)] == [
        b.live(t + s * 1000, 0) for s in range(20)
    ]
    other = Home(seed=3, home_id="h2")
    assert [a.fields(t + s * 1000) for s in range(20)] != [
        other.fields(t + s * 1000) for s in range(20)
    ]
    assert a.fields(t) == a.fields(t + 999) != a.fields(t + 1000)
    still = Home(seed=3, home_id="h1", still=True)
    assert still.fields(t) == still.fields(t + 60_000) == still.physics.at(t)
    a.still = True
    assert a.fields(t) == still.fields(t)
