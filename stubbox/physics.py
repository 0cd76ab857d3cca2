"""The stub home's physics: pure, seeded functions of wall-clock time.

No clock reads, no I/O, no unseeded randomness: a 32-byte key (drawn from the home's
`random.Random(seed)`) keys a BLAKE2b hash that gives each UTC day its weather and load wiggles and
each hour its price. Days are UTC days and every hour below is a UTC hour.

Units W, Wh, permille; site sign: grid positive = import, battery positive = charging.

- PV: a cos² bell from 05:00 to 19:00 peaking at 12:00 near 6 kW, times the day's cloudiness.
- House load: about 400 W plus a morning peak (07:15) and an evening peak (18:30).
- EV: 7.4 kW from 01:00 to 05:00 (loadpoint "lp1" charging "car1"), else 0.
- Battery: 10 kWh, starts each day at 200 permille, charges from PV surplus (and from cheap night
  power on cloudy days), covers the morning (when charged) and the evening, and empties to
  200 permille by midnight. State of charge is integrated on a 5-minute grid from midnight and
  stays within 100..1000 permille.
- Grid: load + ev + battery - pv, exactly, on every 5-minute slot.
- Prices: hourly spot for zone SE3 in SEK öre per kWh, cheap at night and midday; the import
  price adds grid fee, energy tax and VAT.
- Gaps: one hour in every 9 days has no stored data (`series_value` gives None).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Final

DAY_MS: Final = 86_400_000
HOUR_MS: Final = 3_600_000
SLOT_MS: Final = 300_000
"""The physics grid: 5 minutes."""
SERIES: Final = ("grid_w", "pv_w", "battery_w", "battery_soc", "load_w", "ev_w")
"""History series the home stores (frozen field names)."""
CAPACITY_WH: Final = 10_000
RESERVE_WH: Final = 2_000
BATTERY_MAX_W: Final = 5_000
EV_W: Final = 7_400
ZONE: Final = "SE3"
CURRENCY: Final = "SEK"
GRID_FEE_MINOR: Final = 44
ENERGY_TAX_MINOR: Final = 42
VAT_PERMILLE: Final = 250
_GAP_EVERY_H: Final = 9 * 24
_GAP_AT_H: Final = 37
_PRICE_SHAPE: Final = (38, 32, 28, 26, 27, 33, 60, 110, 125, 95, 70, 48,
                       40, 38, 45, 62, 85, 130, 145, 120, 90, 72, 60, 48)  # fmt: skip


@dataclass(frozen=True, slots=True)
class _Day:
    """One UTC day on the 5-minute grid: ints in W, `soc_wh` at each slot's start (Wh)."""

    pv: tuple[int, ...]
    load: tuple[int, ...]
    ev: tuple[int, ...]
    bat: tuple[int, ...]
    soc_wh: tuple[float, ...]


class Physics:
    """The home's power flows and prices; `key` (bytes) seeds weather, wiggles and prices."""

    def __init__(self, key: bytes) -> None:
        self._key = key
        self._days: dict[int, _Day] = {}

    def noise(self, tag: str, n: int) -> bytes:
        """64 keyed pseudo-random bytes for (`tag`, `n`)."""
        return hashlib.blake2b(f"{tag}:{n}".encode(), key=self._key, digest_size=64).digest()

    def clear_sky(self, day: int) -> float:
        """Fraction of clear-sky PV reaching the panels on UTC day `day` (0.3..1.0)."""
        return 0.3 + 0.7 * self.noise("day", day)[0] / 255

    def _day(self, day: int) -> _Day:
        """The 5-minute grid of UTC day `day` (cached, at most 64 days)."""
        cached = self._days.get(day)
        if cached is not None:
            return cached
        noise, clear = self.noise("day", day), self.clear_sky(day)
        pv: list[int] = []
        load: list[int] = []
        ev: list[int] = []
        bat: list[int] = []
        socs: list[float] = []
        soc, dt = float(RESERVE_WH), SLOT_MS / HOUR_MS
        for k in range(DAY_MS // SLOT_MS):
            h = (k + 0.5) * dt
            hour = int(h)
            bell = math.cos(math.pi * (h - 12) / 14) ** 2 if 5 < h < 19 else 0.0
            cloud = 1.0 - (1.0 - clear) * noise[1 + hour] / 255 * 0.5
            p = round(6000 * bell * clear * cloud)
            morning = 900 * math.exp(-(((h - 7.25) / 0.9) ** 2))
            evening = 1500 * math.exp(-(((h - 18.5) / 1.4) ** 2))
            ld = round(400 + morning + evening + noise[25 + hour] // 2)
            e = EV_W if 1 <= h < 5 else 0
            surplus = p - ld - e
            room, avail = (CAPACITY_WH - soc) / dt, max(0.0, soc - RESERVE_WH) / dt
            b = 0.0
            if surplus > 0:
                b = min(surplus, BATTERY_MAX_W, room)
            elif clear < 0.55 and 2 <= h < 5:
                b = max(0.0, min(2000.0, (5000 - soc) / dt))
            elif 6.5 <= h < 9.5 and soc > 3000:
                b = -min(-surplus, BATTERY_MAX_W, (soc - 3000) / dt)
            elif h >= 17:
                need = float(-surplus)
                if h >= 22:
                    need = max(need, (soc - RESERVE_WH) / (24 - k * dt))
                b = -min(need, BATTERY_MAX_W, avail)
            bi = round(b)
            pv.append(p)
            load.append(ld)
            ev.append(e)
            bat.append(bi)
            socs.append(soc)
            soc += bi * dt
        out = _Day(tuple(pv), tuple(load), tuple(ev), tuple(bat), tuple(socs))
        if len(self._days) >= 64:
            self._days.clear()
        self._days[day] = out
        return out

    def grid(self, day: int) -> _Day:
        """The 5-minute grid of UTC day `day`: per slot pv, load, ev, bat in W (the meters')."""
        return self._day(day)

    def missing(self, hour: int) -> bool:
        """Whether UTC hour `hour` since the epoch is the hour of stored data the home lacks."""
        return hour % _GAP_EVERY_H == _GAP_AT_H

    def at(self, t_ms: int) -> dict[str, int]:
        """The six series at wall-clock `t_ms`: W, and `battery_soc` in permille."""
        d = self._day(t_ms // DAY_MS)
        k = (t_ms % DAY_MS) // SLOT_MS
        into_h = (t_ms % SLOT_MS) / HOUR_MS
        soc = round((d.soc_wh[k] + d.bat[k] * into_h) * 1000 / CAPACITY_WH)
        grid = d.load[k] + d.ev[k] + d.bat[k] - d.pv[k]
        return {
            "grid_w": grid,
            "pv_w": d.pv[k],
            "battery_w": d.bat[k],
            "battery_soc": min(1000, max(100, soc)),
            "load_w": d.load[k],
            "ev_w": d.ev[k],
        }

    def series_value(self, series: str, t_ms: int, step_ms: int) -> int | None:
        """Mean of `series` over wall-clock [t_ms, t_ms + step_ms), or None.

        Means W for power series and permille for `battery_soc`, sampled at up to 12 evenly
        spaced points. None for a name outside `SERIES` and when every sample falls in a
        missing hour (one hour in every 9 days, hour `37 mod 216` since the epoch).
        """
        if series not in SERIES:
            return None
        n = max(1, min(12, step_ms // SLOT_MS))
        got = [
            self.at(t)[series]
            for j in range(n)
            if (t := t_ms + (2 * j + 1) * step_ms // (2 * n)) // HOUR_MS % _GAP_EVERY_H != _GAP_AT_H
        ]
        return round(sum(got) / len(got)) if got else None

    def spot(self, hour: int) -> int:
        """Spot price of UTC hour `hour` since the epoch, öre per kWh (integer)."""
        noise = self.noise("price", hour // 24)
        factor = 0.6 + 0.9 * noise[0] / 255
        jitter = 0.9 + 0.2 * noise[1 + hour % 24] / 255
        return round(_PRICE_SHAPE[hour % 24] * factor * jitter)

    def total(self, hour: int) -> int:
        """Import price of `hour` with grid fee, energy tax and VAT, öre per kWh."""
        return round(
            (self.spot(hour) + GRID_FEE_MINOR + ENERGY_TAX_MINOR) * (1000 + VAT_PERMILLE) / 1000
        )
