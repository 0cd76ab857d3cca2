"""The stub home's meters: `energy.get` buckets integrated from the physics its history comes from.

PROTOCOL.md part G. Every 5-minute slot of `stubbox.physics` holds constant mean powers (W), and
the 5-minute history serves exactly those values, so a slot's energy is its power x 1/12 h. The
live readings move each second around them (`stubbox.flicker`) with wiggles that sum to 0 over
the slot and never turn the grid's or the battery's sign, so the same energies are the
readings summed over the slot's seconds, import and export, in and out each on its own. Per
slot, import is the positive part of the grid power and export the negative part (counted apart,
never netted), battery in and out likewise; import is priced at the hour's `totalMinor` and
export at its `spotMinor` (öre per kWh). Sums are kept exact in W x slot units and turned into
whole Wh once per bucket (see `_to_wh`), so the balance
`importWh - exportWh = loadWh + evWh + batteryInWh - batteryOutWh - pvWh` holds exactly and
each energy is within 1 Wh of the integral of the history.

A bucket's `coveredMs` leaves out the hour of stored data the physics drops every 9 days, the
part before the cut-off (the grant's `history_days` or the box's retention of 730 days) and the
part not yet measured: slots that have not closed by now.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Final
from zoneinfo import ZoneInfo

from ftwbridge.proto.calendar import edges

from .physics import CURRENCY, DAY_MS, HOUR_MS, SLOT_MS, Physics

RETENTION_DAYS: Final = 730
"""How long the box keeps its meters (as its hourly history)."""
_PER_HOUR: Final = HOUR_MS // SLOT_MS
_N: Final = 9
# Indices into a sums tuple: energies in W x slot, then costs in W x slot x öre/kWh.
IMP, EXP, PV, LOAD, EV, BIN, BOUT, COST, VALUE = range(_N)
Sums = tuple[int, ...]
_ZERO: Final[Sums] = (0,) * _N


def _add(a: Sums, b: Sums) -> Sums:
    return tuple(x + y for x, y in zip(a, b, strict=True))


class Meters:
    """Energy buckets of one simulated home.

    Args:
        physics: the home's power flows and prices.
        tz: the box's IANA time zone name, where bucket edges fall.

    Raises:
        zoneinfo.ZoneInfoNotFoundError: `tz` names no zone this machine knows.
    """

    def __init__(self, physics: Physics, tz: str) -> None:
        self._physics = physics
        self.tz = tz
        self.zone = ZoneInfo(tz)
        """The zone itself."""
        self._hour = lru_cache(maxsize=24 * 800)(self._hour_sums)

    def _slot(self, t_ms: int) -> Sums:
        d = self._physics.grid(t_ms // DAY_MS)
        k = t_ms % DAY_MS // SLOT_MS
        pv, load, ev, bat = d.pv[k], d.load[k], d.ev[k], d.bat[k]
        grid = load + ev + bat - pv  # as `Physics.at` gives `grid_w`
        imp, exp = max(grid, 0), max(-grid, 0)
        hour = t_ms // HOUR_MS
        return (
            imp,
            exp,
            pv,
            load,
            ev,
            max(bat, 0),
            max(-bat, 0),
            imp * self._physics.total(hour),
            exp * self._physics.spot(hour),
        )

    def _hour_sums(self, hour: int) -> Sums:
        total = _ZERO
        for k in range(_PER_HOUR):
            total = _add(total, self._slot(hour * HOUR_MS + k * SLOT_MS))
        return total

    def sums(self, lo: int, hi: int) -> tuple[Sums, int]:
        """(sums, covered ms) over the stored slots in [lo, hi): both on the 5-minute grid."""
        total, covered, t = _ZERO, 0, lo
        while t < hi:
            hour = t // HOUR_MS
            end = min(hi, (hour + 1) * HOUR_MS)
            if not self._physics.missing(hour):
                if t == hour * HOUR_MS and end == t + HOUR_MS:
                    total = _add(total, self._hour(hour))
                else:
                    for s in range(t, end, SLOT_MS):
                        total = _add(total, self._slot(s))
                covered += end - t
            t = end
        return total, covered

    def energy(
        self, from_ms: int, to_ms: int, bucket: str, now_ms: int, history_days: int
    ) -> dict[str, Any]:
        """The `energy` answer over [from_ms, to_ms) rounded out to whole buckets.

        Buckets that start after `now_ms` are left out; the one running at `now_ms` covers up
        to the last closed 5-minute slot. Times in ms since the epoch, energies in Wh, costs
        in öre (`currency` SEK). Limits are the caller's to check (`stubbox.reads`).
        """
        cutoff = now_ms - min(history_days, RETENTION_DAYS) * DAY_MS
        first = -(-cutoff // SLOT_MS) * SLOT_MS
        measured = now_ms // SLOT_MS * SLOT_MS
        buckets = []
        for start, end in edges(from_ms, min(to_ms, now_ms + 1), bucket, self.zone):
            lo, hi = max(start, first), min(end, measured)
            sums, covered = self.sums(lo, hi) if hi > lo else (_ZERO, 0)
            buckets.append(bucket_body(start, end, sums, covered))
        return {"tz": self.tz, "currency": CURRENCY, "buckets": buckets}


def _nearest(s: int) -> int:
    """s / 12 rounded to the nearest whole number (halves up)."""
    return (2 * s + _PER_HOUR) // (2 * _PER_HOUR)


def _to_wh(sums: Sums) -> dict[str, int]:
    """Whole Wh from W x slot sums, keeping the balance exact and each within 1 Wh.

    Export, PV, load, EV and battery in/out are rounded to the nearest Wh and import follows
    from the balance. When that leaves import more than half a Wh from its own integral, the
    rounding of one term that pushed it away is turned the other way (that term stays within
    1 Wh); each term turns at most once, and one always exists while import is that far off,
    since import's error is the signed sum of the others' errors.
    """
    wh = {i: _nearest(sums[i]) for i in (EXP, PV, LOAD, EV, BIN, BOUT)}
    sign = {EXP: 1, LOAD: 1, EV: 1, BIN: 1, BOUT: -1, PV: -1}

    def imp() -> int:
        return sum(sign[i] * wh[i] for i in sign)

    turned: set[int] = set()
    while abs(_PER_HOUR * imp() - sums[IMP]) * 2 > _PER_HOUR:
        high = _PER_HOUR * imp() > sums[IMP]
        for i, s in sign.items():
            err = _PER_HOUR * wh[i] - sums[i]  # > 0: rounded up
            if i not in turned and (err * s > 0) == high and err != 0:
                wh[i] += -1 if err > 0 else 1
                turned.add(i)
                break
        else:  # pragma: no cover - cannot happen (see above)
            raise AssertionError("no rounding left to turn")
    return {
        "importWh": imp(),
        "exportWh": wh[EXP],
        "pvWh": wh[PV],
        "loadWh": wh[LOAD],
        "evWh": wh[EV],
        "batteryInWh": wh[BIN],
        "batteryOutWh": wh[BOUT],
    }


def bucket_body(start: int, end: int, sums: Sums, covered: int) -> dict[str, Any]:
    """One `Bucket` of part G from exact sums: Wh, and costs in minor units (nearest)."""
    per_minor = _PER_HOUR * 1000  # W x slot x öre/kWh -> öre
    return {
        "startMs": start,
        "endMs": end,
        **_to_wh(sums),
        "importCostMinor": (2 * sums[COST] + per_minor) // (2 * per_minor),
        "exportValueMinor": (2 * sums[VALUE] + per_minor) // (2 * per_minor),
        "coveredMs": covered,
    }
