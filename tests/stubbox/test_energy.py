"""The stub box's meters against PROTOCOL.md part G: energies against the 5-minute history,
the balance exactly, costs against the price slots, bucket edges in Europe/Stockholm, coverage,
and every refusal in words through a real session."""

from __future__ import annotations

from datetime import datetime
from fractions import Fraction
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from ftwbridge.proto.names import Code, Read
from ftwbridge.proto.session import Reply
from stubbox.home import Home
from stubbox.physics import HOUR_MS, SLOT_MS
from stubbox.reads import ANSWER_ROOM_BYTES, ENERGY_BUCKET_BYTES
from tests.stubbox.test_box_pair import NOW, Pair, refusal

DAY = 86_400_000
STOCKHOLM = ZoneInfo("Europe/Stockholm")
HOME = Home(seed=3)
ENERGIES = ("importWh", "exportWh", "pvWh", "loadWh", "evWh", "batteryInWh", "batteryOutWh")


def _ms(*parts: int) -> int:
    return int(datetime(*parts, tzinfo=STOCKHOLM).timestamp() * 1000)  # type: ignore[misc]


def _history(home: Home, lo: int, hi: int) -> dict[str, Fraction]:
    """The integrals of the 5-minute history over [lo, hi), Wh, import and export apart."""
    out = dict.fromkeys(ENERGIES, Fraction(0))
    for t in range(lo, hi, SLOT_MS):
        v = {s: home.series_value(s, t, SLOT_MS) for s in ("grid_w", "pv_w", "load_w", "ev_w")}
        bat = home.series_value("battery_w", t, SLOT_MS)
        if bat is None:
            assert all(x is None for x in v.values())
            continue
        g = v["grid_w"]
        assert g is not None and v["pv_w"] is not None
        assert v["load_w"] is not None and v["ev_w"] is not None
        twelfth = Fraction(1, 12)
        out["importWh"] += max(g, 0) * twelfth
        out["exportWh"] += max(-g, 0) * twelfth
        out["pvWh"] += v["pv_w"] * twelfth
        out["loadWh"] += v["load_w"] * twelfth
        out["evWh"] += v["ev_w"] * twelfth
        out["batteryInWh"] += max(bat, 0) * twelfth
        out["batteryOutWh"] += max(-bat, 0) * twelfth
    return out


def _costs(home: Home, lo: int, hi: int) -> tuple[int, int]:
    """Import cost and export value over [lo, hi) from the `price` slots and the history, öre."""
    cost, value = Fraction(0), Fraction(0)
    for slot in home.price(lo, hi)["slots"]:
        for t in range(
            max(lo, slot["startMs"]), min(hi, slot["startMs"] + slot["durationMs"]), SLOT_MS
        ):
            g = home.series_value("grid_w", t, SLOT_MS)
            if g is None:
                continue
            kwh = Fraction(abs(g), 12_000)
            if g > 0:
                cost += kwh * slot["totalMinor"]
            else:
                value += kwh * slot["spotMinor"]
    return int(cost + Fraction(1, 2)), int(value + Fraction(1, 2))


def _check(bucket: dict[str, Any], now: int) -> None:
    """Part G's consistency rules over one bucket."""
    b = bucket
    assert b["importWh"] - b["exportWh"] == (
        b["loadWh"] + b["evWh"] + b["batteryInWh"] - b["batteryOutWh"] - b["pvWh"]
    )
    hi = min(b["endMs"], now // SLOT_MS * SLOT_MS)
    exact = _history(HOME, b["startMs"], hi)
    slack = max(1, b["coveredMs"] // HOUR_MS)
    for name in ENERGIES:
        assert b[name] >= 0
        assert abs(b[name] - exact[name]) <= slack, (name, b[name], float(exact[name]))
    assert (b["importCostMinor"], b["exportValueMinor"]) == _costs(HOME, b["startMs"], hi)


def test_hours_of_a_day_with_the_missing_hour() -> None:
    gap = next(
        h for h in range(NOW // HOUR_MS - 20 * 24, NOW // HOUR_MS) if HOME.physics.missing(h)
    )
    now = (gap + 30) * HOUR_MS
    answer = HOME.energy(
        gap * HOUR_MS - 10 * HOUR_MS, gap * HOUR_MS + 10 * HOUR_MS, "hour", now, 30
    )
    assert answer["tz"] == "Europe/Stockholm" and answer["currency"] == "SEK"
    buckets = answer["buckets"]
    assert len(buckets) == 20
    for b in buckets:
        _check(b, now)
        missing = b["startMs"] == gap * HOUR_MS
        assert b["coveredMs"] == (0 if missing else HOUR_MS)
        assert (b["importWh"] == 0 and b["pvWh"] == 0) or not missing
    day = HOME.energy(gap * HOUR_MS, gap * HOUR_MS + 1, "day", now, 30)["buckets"]
    assert [b["coveredMs"] for b in day] == [23 * HOUR_MS]
    _check(day[0], now)


@pytest.mark.parametrize(
    ("day", "hours"), [((2026, 3, 29), 23), ((2026, 10, 25), 25), ((2026, 6, 1), 24)]
)
def test_days_across_daylight_saving_changes(day: tuple[int, int, int], hours: int) -> None:
    start = _ms(*day)
    now = start + 3 * DAY
    [b] = HOME.energy(start + 5 * HOUR_MS, start + 6 * HOUR_MS, "day", now, 30)["buckets"]
    assert (b["startMs"], b["endMs"] - b["startMs"]) == (start, hours * HOUR_MS)
    assert b["coveredMs"] in (hours * HOUR_MS, (hours - 1) * HOUR_MS)  # less the missing hour
    _check(b, now)
    hourly = HOME.energy(start, start + 1, "day", now, 30)["buckets"]
    assert hourly == [b]
    per_hour = HOME.energy(start, b["endMs"], "hour", now, 30)["buckets"]
    assert len(per_hour) == hours
    for name in ENERGIES:  # the hours add up to the day within 1 Wh an hour
        assert abs(sum(h[name] for h in per_hour) - b[name]) <= hours


def test_weeks_and_months_in_local_time() -> None:
    now = _ms(2026, 11, 4, 10, 0)
    months = HOME.energy(_ms(2026, 10, 2), now, "month", now, 60)["buckets"]
    assert [b["startMs"] for b in months] == [_ms(2026, 10, 1), _ms(2026, 11, 1)]
    assert months[0]["endMs"] - months[0]["startMs"] == (31 * 24 + 1) * HOUR_MS  # a 25 h day
    assert months[1]["endMs"] == _ms(2026, 12, 1)
    measured = now - months[1]["startMs"]  # the running month: up to now, no further
    assert months[1]["coveredMs"] in (measured, measured - HOUR_MS)
    weeks = HOME.energy(_ms(2026, 10, 21), now, "week", now, 60)["buckets"]
    assert [b["startMs"] for b in weeks] == [_ms(2026, 10, 19), _ms(2026, 10, 26), _ms(2026, 11, 2)]
    assert weeks[1]["startMs"] - weeks[0]["startMs"] == (7 * 24 + 1) * HOUR_MS
    _check(weeks[0], now)


def test_the_running_bucket_covers_closed_slots_only() -> None:
    now = NOW + 123_456
    [b] = HOME.energy(now - 1, now, "hour", now, 30)["buckets"]
    assert b["coveredMs"] == now // SLOT_MS * SLOT_MS - b["startMs"] or HOME.physics.missing(
        b["startMs"] // HOUR_MS
    )
    _check(b, now)
    later = HOME.energy(now - 1, now + 10 * DAY, "day", now, 30)["buckets"]
    assert len(later) == 1 and later[0]["startMs"] <= now < later[0]["endMs"]


def test_before_the_cut_off_is_not_covered() -> None:
    now = _ms(2026, 11, 20, 12)
    [b] = HOME.energy(now - 10 * DAY, now - 10 * DAY + 1, "month", now, 15)["buckets"]
    assert b["startMs"] == _ms(2026, 11, 1)
    cut = now - 15 * DAY
    missing = sum(HOME.physics.missing(h) for h in range(cut // HOUR_MS, now // HOUR_MS))
    assert b["coveredMs"] == now - cut - missing * HOUR_MS


def test_hello_and_config_name_the_zone() -> None:
    p = Pair()
    [ok] = p.hello()
    assert ok.body["box"]["tz"] == "Europe/Stockholm"
    site = p.ask(Read.CONFIG_GET, {"section": "site"})
    assert site.body["config"]["timezone"] == "Europe/Stockholm"


def test_energy_get_through_a_session() -> None:
    p = Pair()
    p.hello()
    reply = p.ask(Read.ENERGY_GET, {"fromMs": NOW - 2 * DAY, "toMs": NOW, "bucket": "day"})
    assert isinstance(reply, Reply) and reply.t == "energy"
    assert [b["startMs"] for b in reply.body["buckets"]] == [
        b["startMs"] for b in HOME.energy(NOW - 2 * DAY, NOW, "day", NOW, 30)["buckets"]
    ]


@pytest.mark.parametrize(
    ("kwargs", "body", "code", "args"),
    [
        (
            {},
            {"fromMs": NOW - 20 * DAY, "toMs": NOW, "bucket": "hour"},
            Code.E_RANGE_TOO_LARGE,
            {"maxMs": 399 * HOUR_MS},
        ),
        (
            {"caps": {"history_days": 500}},
            {"fromMs": NOW - 401 * DAY, "toMs": NOW, "bucket": "day"},
            Code.E_RANGE_TOO_LARGE,
            {"maxMs": 399 * 23 * HOUR_MS},
        ),
        (  # 200 days fit part G's 400 buckets, not one 16 KiB frame
            {"caps": {"history_days": 500}},
            {"fromMs": NOW - 200 * DAY, "toMs": NOW, "bucket": "day"},
            Code.E_RANGE_TOO_LARGE,
            {"maxMs": (ANSWER_ROOM_BYTES // ENERGY_BUCKET_BYTES - 1) * 23 * HOUR_MS},
        ),
        (
            {},
            {"fromMs": NOW - 31 * DAY, "toMs": NOW, "bucket": "day"},
            Code.E_CAP_EXCEEDED,
            {"cap": "history_days", "max": 30, "asked": 31},
        ),
        (
            {},
            {"fromMs": NOW - DAY, "toMs": NOW, "bucket": "year"},
            Code.E_UNKNOWN_OP,
            {"t": "energy.get", "field": "bucket"},
        ),
        (
            {},
            {"fromMs": NOW + DAY, "toMs": NOW + 2 * DAY, "bucket": "day"},
            Code.E_UNKNOWN_OP,
            {"t": "energy.get"},
        ),
        (
            {},
            {"fromMs": "yesterday", "toMs": NOW, "bucket": "day"},
            Code.E_UNKNOWN_OP,
            {"arg": "fromMs"},
        ),
        (
            {"scopes": ("ftw.live.read",)},
            {"fromMs": NOW - DAY, "toMs": NOW, "bucket": "day"},
            Code.E_SCOPE_DENIED,
            {"needScope": "ftw.history.read"},
        ),
    ],
)
def test_refusals(kwargs: dict[str, Any], body: Any, code: Code, args: dict[str, Any]) -> None:
    p = Pair(**kwargs)
    p.hello()
    assert refusal(p.ask(Read.ENERGY_GET, body)) == (code, args)


def test_the_widest_answer_that_fits_one_frame() -> None:
    p = Pair(caps={"history_days": 500})
    p.hello()
    n = ANSWER_ROOM_BYTES // ENERGY_BUCKET_BYTES
    reply = p.ask(Read.ENERGY_GET, {"fromMs": NOW - (n - 2) * DAY, "toMs": NOW, "bucket": "day"})
    assert isinstance(reply, Reply) and len(reply.body["buckets"]) == n - 1
