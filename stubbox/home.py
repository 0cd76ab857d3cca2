"""A deterministic simulated home for the stub box: the answer bodies of agent reads.

Pure: every method takes the wall clock `now_ms` (ms since the Unix epoch) and, where ages
matter, the box uptime `uptime_ms`; the only randomness is a `random.Random(seed)` made here,
which keys the physics (`stubbox.physics`) and the cursors of events and logs
(`stubbox.journal`). Hours are UTC hours.

Devices: loadpoint "lp1" ("Garage charger") charges car "car1" ("Family car") from 01:00 to 05:00;
"car1" is away 08:00-17:30; "car2" ("Second car") is never plugged in. Sources and drivers:
"meter.p1", "inverter.sungrow", "battery.pylontech", "charger.easee"; the charger lags one minute
in 47. Answer shapes: agents.yaml `answers`; `plan` and `price` as upstream.
"""

from __future__ import annotations

import random
from typing import Any, Final

from ftwbridge.proto.names import SourceState

from . import charger, settings
from .flicker import Flicker
from .journal import HOSTILE_FRAGMENTS, Journal, hostile
from .meters import Meters
from .physics import (
    CAPACITY_WH,
    CURRENCY,
    DAY_MS,
    HOUR_MS,
    RESERVE_WH,
    SERIES,
    SLOT_MS,
    ZONE,
    Physics,
)
from .settings import EXPENSIVE_MINOR, MODE, PLAN_HOURS, PLAN_SLOT_MS

__all__ = ["HOSTILE_FRAGMENTS", "MODE", "SERIES", "Home"]

PRICE_WINDOW_MS: Final = 8 * DAY_MS
DEFAULT_TZ: Final = "Europe/Stockholm"
"""The stub home's time zone unless told otherwise (it sits in price zone SE3)."""
_SOURCES: Final = (  # id, kind, readable name, base lag ms
    ("meter.p1", "meter", "P1 meter", 400),
    ("inverter.sungrow", "inverter", "Sungrow inverter", 900),
    ("battery.pylontech", "battery", "Pylontech battery", 700),
    ("charger.easee", "charger", "Easee charger", 600),
)
_STALE_AFTER_MS: Final = 10_000


class Home:
    """A simulated home; equal seeds, identities and time arguments give equal answers.

    `hostile=True` mixes `HOSTILE_FRAGMENTS` into device names, event texts and log texts;
    `tz` is the box's IANA time zone, where its energy buckets start (`stubbox.meters`).
    Its readings (`live`, the telemetry stream, the meter check) move every second as a real
    meter's do (`stubbox.flicker`, seeded by `seed` and `home_id`); `still=True` (or setting
    `still` later) gives the 5-minute slots' own values instead, which hold for a whole slot.
    History, plan and meters are the slots' values either way.

    Raises:
        zoneinfo.ZoneInfoNotFoundError: `tz` names no zone this machine knows.
    """

    def __init__(
        self,
        *,
        seed: int = 1,
        hostile: bool = False,
        tz: str = DEFAULT_TZ,
        home_id: str = "",
        still: bool = False,
    ) -> None:
        rng = random.Random(seed)
        self.physics = Physics(rng.randbytes(32))
        self.meters = Meters(self.physics, tz)
        self.tz = tz
        self.hostile = hostile
        self._journal = Journal(rng.randbytes(32), hostile=hostile)
        self.flicker = Flicker(self.physics, rng.randbytes(32), home_id)
        self.still = still
        """True: readings are the 5-minute slots' values (`Physics.at`), without the flicker."""
        self.controls = charger.Controls()
        self.lag_ms: dict[str, int] = {}
        """Per source id, a lag (ms) the console set (`source {id, lagMs}`): at or past
        `staleAfterMs` the source reads as stale."""
        """What commands and the owner's decisions changed (holds, targets, mode, rev)."""

    def _name(self, text: str, k: int) -> str:
        return hostile(text, k) if self.hostile else text

    def series_value(self, series: str, t_ms: int, step_ms: int) -> int | None:
        """Mean of `series` over wall-clock [t_ms, t_ms + step_ms), or None (see `Physics`).

        W for power series, permille for `battery_soc`; None for a name outside `SERIES` and
        for the missing hour (one hour in every 9 days).
        """
        return self.physics.series_value(series, t_ms, step_ms)

    # -- answers ------------------------------------------------------------------------------

    def _sources(self, now_ms: int, uptime_ms: int) -> list[tuple[str, str, str, int, SourceState]]:
        """(id, kind, name, lastOkMs, state) per source; the charger lags one minute in 47."""
        out = []
        for i, (sid, kind, name, lag) in enumerate(_SOURCES):
            if kind == "charger" and (now_ms // 60_000) % 47 == 0:
                lag = 7_000
            lag = self.lag_ms.get(sid, lag)
            if uptime_ms < lag and sid not in self.lag_ms:
                last, state = 0, SourceState.NEVER
            else:
                last = max(uptime_ms - lag, 0)
                state = SourceState.LIVE if lag < _STALE_AFTER_MS // 2 else SourceState.LAGGING
                state = SourceState.STALE if lag >= _STALE_AFTER_MS else state
            out.append((sid, kind, self._name(name, i + 3), last, state))
        return out

    def fields(self, now_ms: int) -> dict[str, int]:
        """The frozen fields now (W, `battery_soc` permille): the meter's second
        (`Flicker.at`, or the slot's value when `still`), with what a held charger draws as
        `ev_w` (and the grid making up the difference)."""
        f = self.physics.at(now_ms) if self.still else self.flicker.at(now_ms)
        held = self.controls.ev_w(now_ms)
        if held is not None:
            f["grid_w"] += held - f["ev_w"]
            f["ev_w"] = held
        return f

    def live(self, now_ms: int, uptime_ms: int) -> dict[str, Any]:
        """The `live` answer: fields in W (soc in permille), `lastOkMs` in box uptime ms."""
        return {
            "uptimeMs": uptime_ms,
            "nowMs": now_ms,
            "controlRev": self.controls.rev,
            "mode": self.controls.mode,
            "fields": self.fields(now_ms),
            "sources": {
                sid: {
                    "kind": kind,
                    "name": name,
                    "lastOkMs": last,
                    "staleAfterMs": _STALE_AFTER_MS,
                    "state": state.value,
                }
                for sid, kind, name, last, state in self._sources(now_ms, uptime_ms)
            },
            "dispatchBlockedBy": list(self.controls.blocked_by),
        }

    def loadpoints(self, now_ms: int) -> dict[str, Any]:
        """The `loadpoints` answer (`stubbox.charger.loadpoints`): the charger as held."""
        return charger.loadpoints(self.controls, self._name("Garage charger", 0), now_ms)

    def cars(self, now_ms: int) -> dict[str, Any]:
        """The `cars` answer (`stubbox.charger.cars`): permille, km, the owner's targets."""
        soc2 = 400 + 2 * self.physics.noise("car2", now_ms // DAY_MS)[0]
        names = (self._name("Family car", 1), self._name("Second car", 2))
        return charger.cars(self.controls, names, soc2, now_ms)

    def _reason(self, bat: int, grid: int, soc: int, price: int, pv: int, use: int) -> str:
        if bat > 50:
            return "solar_surplus" if grid <= 50 else "cheap_import"
        if bat < -50:
            if grid < -50:
                return "export_paid"
            return "expensive_import" if price >= EXPENSIVE_MINOR else "peak_shaving"
        if soc <= RESERVE_WH * 1000 // CAPACITY_WH + 10 and pv < use:
            return "reserve_held"
        return "idle"

    def plan(self, now_ms: int, uptime_ms: int) -> dict[str, Any]:
        """The upstream `plan` body: 192 slots of 15 min from the current quarter hour.

        Slots: wall-clock `startMs`, `durationMs`, `batteryW` and `gridW` in W (site sign),
        `priceMinor` import öre per kWh, `reason`. `uptimeMs` is box uptime.
        """
        start = now_ms - now_ms % PLAN_SLOT_MS
        slots = []
        for s in range(PLAN_HOURS * HOUR_MS // PLAN_SLOT_MS):
            t = start + s * PLAN_SLOT_MS
            parts = [self.physics.at(t + j * SLOT_MS) for j in range(PLAN_SLOT_MS // SLOT_MS)]
            mean = {k: round(sum(p[k] for p in parts) / len(parts)) for k in parts[0]}
            price = self.physics.total(t // HOUR_MS)
            use = mean["load_w"] + mean["ev_w"]
            reason = self._reason(
                mean["battery_w"], mean["grid_w"], mean["battery_soc"], price, mean["pv_w"], use
            )
            slots.append(
                {
                    "startMs": t,
                    "durationMs": PLAN_SLOT_MS,
                    "batteryW": mean["battery_w"],
                    "gridW": mean["grid_w"],
                    "priceMinor": price,
                    "reason": reason,
                }
            )
        return {
            "rev": now_ms // PLAN_SLOT_MS % 2**31,
            "uptimeMs": uptime_ms,
            "slots": slots,
            "stale": False,
            "ceilingW": None,
        }

    def price(self, from_ms: int, to_ms: int) -> dict[str, Any]:
        """The upstream `price` body: hourly slots over wall-clock [from_ms, to_ms), at most 8 days.

        Prices in öre per kWh; `totalMinor` adds grid fee, energy tax and VAT. `stale` is True
        when the slots do not cover the window (clamped at 8 days, or an empty window).
        """
        end = min(to_ms, from_ms + PRICE_WINDOW_MS)
        slots: list[dict[str, int]] = []
        if to_ms <= from_ms:
            return {"zone": ZONE, "currency": CURRENCY, "slots": slots, "stale": True}
        t = from_ms - from_ms % HOUR_MS
        while t < end:
            hour = t // HOUR_MS
            slots.append(
                {
                    "startMs": t,
                    "durationMs": HOUR_MS,
                    "spotMinor": self.physics.spot(hour),
                    "totalMinor": self.physics.total(hour),
                }
            )
            t += HOUR_MS
        return {
            "zone": ZONE,
            "currency": CURRENCY,
            "slots": slots,
            "stale": not slots or end < to_ms,
        }

    def drivers(self, now_ms: int, uptime_ms: int) -> dict[str, Any]:
        """The `drivers` answer: one driver per source, named by its id ("meter.p1", ...).

        `lastOkMs` is box uptime ms; `errors24h` a count.
        """
        return {
            "drivers": [
                {
                    "name": self._name(sid, i + 1),
                    "kind": kind,
                    "state": state.value,
                    "lastOkMs": last,
                    "errors24h": self.physics.noise("errors", now_ms // DAY_MS)[i] % 4 * i,
                }
                for i, (sid, kind, _name, last, state) in enumerate(
                    self._sources(now_ms, uptime_ms)
                )
            ]
        }

    def health(self, now_ms: int, uptime_ms: int) -> dict[str, Any]:
        """The `health` answer: status ok or degraded, checks clock, drivers, planner, storage."""
        states = [s for *_, s in self._sources(now_ms, uptime_ms)]
        live = sum(s is SourceState.LIVE for s in states)
        checks = [
            {"name": "clock", "state": "ok", "detail": "ntp synced"},
            {
                "name": "drivers",
                "state": "ok" if live == len(states) else "warn",
                "detail": f"{live} of {len(states)} drivers live",
            },
            {
                "name": "planner",
                "state": "ok",
                "detail": f"plan rev {now_ms // PLAN_SLOT_MS % 2**31}",
            },
            {
                "name": "storage",
                "state": "ok",
                "detail": "history kept 30 days at 5 min, 730 at 1 h",
            },
        ]
        degraded = any(c["state"] != "ok" for c in checks)
        return {"status": "degraded" if degraded else "ok", "uptimeMs": uptime_ms, "checks": checks}

    def events(
        self,
        now_ms: int,
        *,
        limit: int,
        before: str | None = None,
        after: str | None = None,
        max_bytes: int | None = None,
    ) -> dict[str, Any] | None:
        """The `events` answer, newest first: one event every 37 min over the last 30 days.

        `before` pages to older items, `after` to newer (the `limit` nearest the cursor; with
        both, the items between, nearest `before`); `more` says whether more remain that way. `limit` is capped at the contract's maximum. With
        `max_bytes`, items stop before the answer's CBOR would pass it (then `more` is True).
        None when a cursor is not one this home gave.
        """
        return self._journal.events(
            now_ms, limit_=limit, before=before, after=after, max_bytes=max_bytes
        )

    def logs(
        self,
        now_ms: int,
        *,
        lines: int,
        level: str,
        before: str | None = None,
        after: str | None = None,
        max_bytes: int | None = None,
    ) -> dict[str, Any] | None:
        """The `logs` answer, newest first: one line every 3 min, at `level` and above.

        Paging, `more` and `max_bytes` as `events`. None for an unknown cursor or a `level`
        outside `stubbox.journal.LOG_LEVELS`.
        """
        return self._journal.logs(
            now_ms, lines=lines, level=level, before=before, after=after, max_bytes=max_bytes
        )

    def energy(
        self, from_ms: int, to_ms: int, bucket: str, now_ms: int, history_days: int
    ) -> dict[str, Any]:
        """The `energy` answer of PROTOCOL.md part G (`stubbox.meters.Meters.energy`)."""
        return self.meters.energy(from_ms, to_ms, bucket, now_ms, history_days)

    def config(self, section: str) -> dict[str, Any] | None:
        """The `config` answer for `section` (site, battery, loadpoints, tariff, planner), or None.

        Units in the key names; never a secret.
        """
        sections = settings.sections(self._name("Garage charger", 0), self.tz)
        if section not in sections:
            return None
        return {"section": section, "config": sections[section]}

    def diag(
        self, check: str, src: str | None, now_ms: int, uptime_ms: int
    ) -> dict[str, Any] | None:
        """The `diag` answer for `check` (clock, link, meter, planner, driver), or None.

        For `driver`, `src` must name a driver (its id such as "meter.p1", or the name
        `drivers` shows), else None; other checks ignore `src` and leave it out. Times: `nowMs`
        wall clock, `uptimeMs` and `lastOkMs` box uptime, other `*Ms` durations in ms.
        """
        sources = self._sources(now_ms, uptime_ms)
        details: dict[str, Any]
        result = "pass"
        if check == "clock":
            details = {
                "source": "ntp",
                "nowMs": now_ms,
                "uptimeMs": uptime_ms,
                "skewMs": 4,
                "syncedAgoMs": 720_000,
            }
        elif check == "link":
            details = {"relay": "connected", "rttMs": 30 + now_ms // 1000 % 20, "lossPermille": 0}
        elif check == "meter":
            sid, _kind, _name, last, state = sources[0]
            result = "pass" if state is SourceState.LIVE else "warn"
            details = {
                "driver": sid,
                "grid_w": self.fields(now_ms)["grid_w"],
                "lastOkMs": last,
                "state": state.value,
            }
        elif check == "planner":
            details = {
                "rev": now_ms // PLAN_SLOT_MS % 2**31,
                "slots": PLAN_HOURS * 4,
                "stale": False,
                "horizonMs": PLAN_HOURS * HOUR_MS,
            }
        elif check == "driver":
            found = [
                row
                for i, row in enumerate(sources)
                if src is not None and src in (row[0], self._name(row[0], i + 1))
            ]
            if not found:
                return None
            sid, kind, _name, last, state = found[0]
            details = {
                "driver": sid,
                "kind": kind,
                "state": state.value,
                "lastOkMs": last,
                "staleAfterMs": _STALE_AFTER_MS,
            }
            result = "pass" if state is SourceState.LIVE else "warn"
            return {"check": check, "src": src, "result": result, "details": details}
        else:
            return None
        return {"check": check, "result": result, "details": details}
