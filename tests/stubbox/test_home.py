"""The simulated home: deterministic, shaped as agents.yaml and upstream say, signed by site rules.

Answer shapes are read from the packaged agents.yaml `answers` (a small parser for its CDDL-like
text below), so a change there shows up here.
"""

from __future__ import annotations

import itertools
import re
from importlib.resources import files
from typing import Any

import pytest
import yaml

from ftwbridge.proto.clean import clean
from ftwbridge.proto.envelope import dumps
from ftwbridge.proto.registry import FROZEN_FIELDS, limit
from stubbox.home import HOSTILE_FRAGMENTS, MODE, SERIES, Home
from stubbox.journal import LOG_LEVELS

NOW = 1_755_777_777_000  # 2025-08-21 12:02:57 UTC
UPTIME = 86_400_123
DAY = 86_400_000
HOUR = 3_600_000
TIMES = [NOW, NOW - 10 * HOUR, NOW + 7 * HOUR, NOW + 13 * HOUR]  # noon, 02:00, 19:00, 01:00
LAGGING = (NOW // 60_000 // 47 + 1) * 47 * 60_000  # the charger lags one minute in 47
REASONS = {
    "cheap_import",
    "expensive_import",
    "solar_surplus",
    "peak_shaving",
    "reserve_held",
    "export_paid",
    "idle",
}


def _contract() -> dict[str, Any]:
    text = (files("ftwbridge.proto") / "contract" / "agents.yaml").read_text("utf-8")
    data: dict[str, Any] = yaml.safe_load(text)
    return data


# -- a parser for agents.yaml `answers` -----------------------------------------------------------

ANY = ("any",)
_TYPES = {"id", "null", "bool", "tstr", "value", "int"}


def _parse(text: str) -> Any:
    tokens = re.findall(r"[{}\[\]:,]|[^{}\[\]:,\s]+", text.split(";")[0])
    pos = 0

    def value() -> Any:
        nonlocal pos
        tok = tokens[pos]
        pos += 1
        if tok == "{":
            out: Any = mapping()
        elif tok == "[":
            out = ("array", value())
            assert tokens[pos] == "]"
            pos += 1
        else:
            alts = tok.split("|")
            out = ANY if any(a in _TYPES for a in alts) else ("enum", frozenset(alts))
        if pos < len(tokens) and tokens[pos].startswith("|"):
            pos += 1
            out = ("nullable", out)
        return out

    def mapping() -> Any:
        nonlocal pos
        keys: dict[str, tuple[bool, Any]] = {}
        while tokens[pos] != "}":
            key = tokens[pos]
            pos += 1
            sub: Any = ANY
            if tokens[pos] == ":":
                pos += 1
                sub = value()
            name, _, alt = key.partition("|")
            sub = ("nullable", sub) if alt else sub
            keys[name.rstrip("?")] = (name.endswith("?"), sub)
            if tokens[pos] == ",":
                pos += 1
        pos += 1
        return ("map", keys)

    return value()


def _conforms(v: Any, schema: Any, path: str = "$") -> None:
    kind = schema[0]
    if kind == "nullable":
        if v is not None:
            _conforms(v, schema[1], path)
    elif kind == "enum":
        assert v in schema[1], (path, v)
    elif kind == "array":
        assert isinstance(v, list), path
        for i, item in enumerate(v):
            _conforms(item, schema[1], f"{path}[{i}]")
    elif kind == "map":
        assert isinstance(v, dict), path
        keys = schema[1]
        wild = [k for k in keys if k.startswith("<")]
        if wild:
            for k, item in v.items():
                _conforms(item, keys[wild[0]][1], f"{path}.{k}")
            return
        assert set(v) <= set(keys), (path, set(v) - set(keys))
        assert {k for k, (opt, _) in keys.items() if not opt} <= set(v), path
        for k, item in v.items():
            _conforms(item, keys[k][1], f"{path}.{k}")


ANSWERS = {name: _parse(text) for name, text in _contract()["answers"].items()}
CONTROL_ANSWERS = {"goal.queued", "requests"}
"""Answers of part E served by the box's goal requests (`stubbox/goals.py`), not the home."""
# Part E: the bridge reads `loadpoints.get` for the `controlRev` its first command expects,
# so `loadpoints` carries it beside the contract's keys (docs/protocol.md).


def _all_answers(home: Home, now: int) -> dict[str, list[Any]]:
    return {
        "live": [home.live(now, UPTIME)],
        "loadpoints": [home.loadpoints(now)],
        "cars": [home.cars(now)],
        "health": [home.health(now, UPTIME)],
        "events": [home.events(now, limit=100)],
        "logs": [home.logs(now, lines=500, level="debug")],
        "drivers": [home.drivers(now, UPTIME)],
        "energy": [
            home.energy(now - 40 * DAY, now, bucket, now, 30)
            for bucket in ("hour", "day", "week", "month")
        ],
        "config": [home.config(s) for s in ("site", "battery", "loadpoints", "tariff", "planner")],
        "diag": [
            home.diag(c, "charger.easee", now, UPTIME)
            for c in ("clock", "link", "meter", "planner", "driver")
        ],
    }


@pytest.mark.parametrize("now", [*TIMES, LAGGING])
@pytest.mark.parametrize("hostile", [False, True])
def test_answers_have_exactly_the_contract_keys(now: int, hostile: bool) -> None:
    home = Home(seed=3, hostile=hostile)
    answers = _all_answers(home, now)
    assert set(answers) == set(ANSWERS) - CONTROL_ANSWERS
    for name, bodies in answers.items():
        for body in bodies:
            if name == "loadpoints":
                assert body.pop("controlRev") == home.controls.rev
            _conforms(body, ANSWERS[name], name)
            dumps(body)  # every answer is CBOR-encodable as it stands


def test_answer_values_follow_the_contract() -> None:
    home = Home()
    live = home.live(NOW, UPTIME)
    modes = yaml.safe_load((files("ftwbridge.proto") / "contract" / "registry.yaml").read_text())
    assert live["mode"] == MODE in {m["key"] for m in modes["modes"]}
    assert set(SERIES) <= set(FROZEN_FIELDS.values())
    assert all(isinstance(v, int) for v in live["fields"].values())
    assert {s["state"] for s in live["sources"].values()} == {"live"}
    assert home.live(LAGGING, UPTIME)["sources"]["charger.easee"]["state"] == "lagging"
    assert home.health(LAGGING, UPTIME)["status"] == "degraded"
    assert {s["state"] for s in home.live(NOW, 0)["sources"].values()} == {"never"}
    for src in live["sources"].values():
        assert src["lastOkMs"] <= UPTIME


def test_same_seed_and_time_give_equal_answers() -> None:
    a, b = Home(seed=7, hostile=True), Home(seed=7, hostile=True)
    for now in TIMES:
        assert _all_answers(a, now) == _all_answers(b, now)
        assert a.plan(now, UPTIME) == b.plan(now, UPTIME)
        assert a.price(now, now + DAY) == b.price(now, now + DAY)
    assert Home(seed=1).price(NOW, NOW + DAY) != Home(seed=2).price(NOW, NOW + DAY)


def test_sign_convention_and_state_of_charge() -> None:
    home = Home(seed=4)
    for t in range(NOW - 3 * DAY, NOW + 3 * DAY, 5 * 60_000):
        f = home.live(t, UPTIME)["fields"]
        assert f["grid_w"] == f["load_w"] + f["ev_w"] + f["battery_w"] - f["pv_w"]
        assert 100 <= f["battery_soc"] <= 1000
        assert f["pv_w"] >= 0 and f["load_w"] > 0 and f["ev_w"] in (0, 7400)
    night, noon = home.live(NOW - 10 * HOUR, UPTIME)["fields"], home.live(NOW, UPTIME)["fields"]
    assert night["pv_w"] == 0 and night["ev_w"] == 7400 and night["grid_w"] > 7000
    assert noon["pv_w"] > 1000 and noon["ev_w"] == 0
    lp = home.loadpoints(NOW - 10 * HOUR)["loadpoints"][0]
    assert lp["state"] == "charging" and lp["power_w"] == 7400 and lp["car"] == "car1"
    assert home.loadpoints(NOW)["loadpoints"][0]["state"] == "idle"


def test_state_of_charge_moves_smoothly_across_midnight() -> None:
    home = Home(seed=5)
    prev = home.series_value("battery_soc", NOW - 5 * DAY, 60_000)
    for t in range(NOW - 5 * DAY, NOW + 2 * DAY, 5 * 60_000):
        soc = home.physics.at(t)["battery_soc"]
        assert prev is not None and abs(soc - prev) <= 45  # 5 kW for 5 minutes = 42 permille
        prev = soc


def test_plan_has_the_upstream_shape() -> None:
    home = Home()
    plan = home.plan(NOW, UPTIME)
    assert list(plan) == ["rev", "uptimeMs", "slots", "stale", "ceilingW"]
    assert plan["uptimeMs"] == UPTIME and plan["stale"] is False and plan["ceilingW"] is None
    slots = plan["slots"]
    assert len(slots) == 48 * 4
    assert slots[0]["startMs"] <= NOW < slots[0]["startMs"] + 900_000
    assert slots[0]["startMs"] % 900_000 == 0
    for a, b in itertools.pairwise(slots):
        assert b["startMs"] == a["startMs"] + a["durationMs"]
    reasons = set()
    for day in range(10):
        for s in home.plan(NOW + day * DAY, UPTIME)["slots"]:
            assert set(s) == {"startMs", "durationMs", "batteryW", "gridW", "priceMinor", "reason"}
            assert all(isinstance(s[k], int) for k in ("batteryW", "gridW", "priceMinor"))
            reasons.add(s["reason"])
    assert reasons == REASONS


def test_price_covers_the_window_up_to_eight_days() -> None:
    home = Home()
    price = home.price(NOW, NOW + DAY)
    assert list(price) == ["zone", "currency", "slots", "stale"]
    assert (price["zone"], price["currency"], price["stale"]) == ("SE3", "SEK", False)
    slots = price["slots"]
    assert slots[0]["startMs"] <= NOW and slots[-1]["startMs"] + HOUR >= NOW + DAY
    assert all(set(s) == {"startMs", "durationMs", "spotMinor", "totalMinor"} for s in slots)
    assert all(s["totalMinor"] > s["spotMinor"] > 0 for s in slots)
    by_hour = {s["startMs"] // HOUR % 24: s["spotMinor"] for s in slots}
    assert by_hour[3] < by_hour[18] and by_hour[12] < by_hour[8]
    far = home.price(NOW, NOW + 10 * DAY)
    assert far["stale"] is True and len(far["slots"]) <= 8 * 24 + 1
    assert home.price(NOW, NOW)["stale"] is True


def test_series_value_knows_the_frozen_fields_and_has_gaps() -> None:
    home = Home()
    assert home.series_value("nonsense", NOW, 300_000) is None
    t = NOW - NOW % 300_000
    tile = home.series_value("grid_w", t, 300_000)
    seconds = [home.live(t + s * 1000, UPTIME)["fields"]["grid_w"] for s in range(300)]
    assert tile is not None and sum(seconds) == 300 * tile  # the meter's mean over the tile
    assert tile == Home(still=True).live(t + 123_456, UPTIME)["fields"]["grid_w"]
    gap_hour = next(h for h in range(NOW // HOUR, NOW // HOUR - 400, -1) if h % 216 == 37)
    assert home.series_value("pv_w", gap_hour * HOUR, HOUR) is None
    assert home.series_value("pv_w", gap_hour * HOUR + 600_000, 300_000) is None
    assert home.series_value("pv_w", (gap_hour - 1) * HOUR, 2 * HOUR) is not None


def test_events_page_back_and_forth() -> None:
    home = Home()
    first = home.events(NOW, limit=100)
    assert first is not None and len(first["events"]) == 100 and first["more"]
    seen = list(first["events"])
    more = first["more"]
    while more:
        older = home.events(NOW, limit=100, before=seen[-1]["cursor"])
        assert older is not None
        seen += older["events"]
        more = older["more"]
    times = [e["atMs"] for e in seen]
    assert times == sorted(times, reverse=True) and len(set(times)) == len(times)
    assert times[-1] > NOW - 30 * DAY and times[0] <= NOW
    assert len(seen) == 30 * 24 * 60 // 37
    back: list[dict[str, Any]] = []
    cursor = seen[-1]["cursor"]
    while True:
        page = home.events(NOW, limit=37, after=cursor)
        assert page is not None and page["events"]
        back = page["events"] + back
        cursor = page["events"][0]["cursor"]
        if not page["more"]:
            break
    assert back == seen[:-1]
    assert all(e["level"] in ("info", "warn", "error") for e in seen)


def test_unknown_cursors_are_refused() -> None:
    home = Home()
    page = home.events(NOW, limit=5)
    logs = home.logs(NOW, lines=5, level="info")
    assert page is not None and logs is not None
    good = page["events"][0]["cursor"]
    forged = good[:-1] + ("0" if good[-1] != "0" else "1")
    for bad in ["", "abc", forged, logs["lines"][0]["cursor"], good + "0"]:
        assert home.events(NOW, limit=5, before=bad) is None
        assert home.events(NOW, limit=5, after=bad) is None
    assert home.logs(NOW, lines=5, level="info", before=good) is None
    assert Home(seed=2).events(NOW, limit=5, before=good) is None
    assert home.logs(NOW, lines=5, level="loud") is None


@pytest.mark.parametrize("level", LOG_LEVELS)
def test_logs_filter_by_level_and_page(level: str) -> None:
    home = Home()
    allowed = LOG_LEVELS[LOG_LEVELS.index(level) :]
    page = home.logs(NOW, lines=50, level=level)
    assert page is not None and len(page["lines"]) == 50 and page["more"]
    older = home.logs(NOW, lines=50, level=level, before=page["lines"][-1]["cursor"])
    assert older is not None
    lines = page["lines"] + older["lines"]
    assert all(line["level"] in allowed for line in lines)
    times = [line["atMs"] for line in lines]
    assert times == sorted(times, reverse=True) and len(set(times)) == len(times)
    newer = home.logs(NOW, lines=50, level=level, after=older["lines"][0]["cursor"])
    assert newer is not None and newer["lines"] == page["lines"] and not newer["more"]


def test_limits_are_capped_and_max_bytes_respected() -> None:
    home = Home(hostile=True)
    big = home.events(NOW, limit=10_000)
    assert big is not None and len(big["events"]) == limit("events_limit", "max")
    lines = home.logs(NOW, lines=10_000, level="debug")
    assert lines is not None and len(lines["lines"]) == limit("logs_lines", "max")
    for max_bytes in (20, 300, 1000, 4000, 16_000):
        ev = home.events(NOW, limit=100, max_bytes=max_bytes)
        lg = home.logs(NOW, lines=500, level="debug", max_bytes=max_bytes)
        assert ev is not None and lg is not None
        assert len(dumps(ev)) <= max_bytes or not ev["events"]
        assert len(dumps(lg)) <= max_bytes or not lg["lines"]
        assert ev["more"] and lg["more"]
    fits = home.logs(NOW, lines=500, level="debug", max_bytes=16_000)
    assert fits is not None and len(dumps(fits)) > 16_000 - 200  # filled, not cut early
    assert home.events(NOW, limit=10, max_bytes=10**6) == home.events(NOW, limit=10)


def _texts(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [t for k, v in value.items() for t in (*_texts(k), *_texts(v))]
    if isinstance(value, list):
        return [t for v in value for t in _texts(v)]
    return []


def test_hostile_home_hides_every_fragment_and_plain_home_none() -> None:
    hostile, plain = Home(hostile=True), Home()
    for home, want in ((hostile, True), (plain, False)):
        answers = _all_answers(home, NOW - 10 * HOUR)
        blob = "\n".join(_texts(answers))
        for fragment in HOSTILE_FRAGMENTS:
            assert (fragment in blob) is want, repr(fragment)
        names = "\n".join(_texts([answers["loadpoints"], answers["cars"], answers["drivers"]]))
        names += "\n".join(s["name"] for s in answers["live"][0]["sources"].values())
        assert all(f in names for f in HOSTILE_FRAGMENTS) is want
    for key in ("events", "logs"):
        blob = "\n".join(_texts(_all_answers(hostile, NOW)[key]))
        assert all(f in blob for f in HOSTILE_FRAGMENTS)
    # Hidden text only: cleaning gives back the plain home's names and texts.
    h, p = _all_answers(hostile, NOW), _all_answers(plain, NOW)
    for key in ("loadpoints", "cars", "drivers", "live"):
        assert [clean(t) for t in _texts(h[key])] == _texts(p[key])
    assert [clean(e["text"]) for e in h["events"][0]["events"]] == [
        e["text"] for e in p["events"][0]["events"]
    ]
    shown = hostile.drivers(NOW, UPTIME)["drivers"][0]["name"]
    assert shown != "meter.p1"
    for src in (shown, "meter.p1"):
        diag = hostile.diag("driver", src, NOW, UPTIME)
        assert diag is not None and diag["src"] == src


def test_config_and_diag_refuse_unknowns_and_keep_no_secrets() -> None:
    home = Home()
    assert home.config("secrets") is None and home.config("") is None
    secret = re.compile(r"token|passw|secret|api_?key|private|credential", re.IGNORECASE)
    for section in ("site", "battery", "loadpoints", "tariff", "planner"):
        body = home.config(section)
        assert body is not None and body["section"] == section
        assert not any(secret.search(t) for t in _texts(body))
    assert home.diag("nonsense", None, NOW, UPTIME) is None
    assert home.diag("driver", None, NOW, UPTIME) is None
    assert home.diag("driver", "meter.p2", NOW, UPTIME) is None
    clock = home.diag("clock", "ignored", NOW, UPTIME)
    assert clock is not None and "src" not in clock and clock["details"]["nowMs"] == NOW
