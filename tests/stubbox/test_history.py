"""History tiles: upstream geometry, packing, etag, missing points and gaps."""

from __future__ import annotations

import struct
from typing import Any

import pytest

from ftwbridge.proto.envelope import Envelope
from ftwbridge.proto.names import Answer, Resolution
from ftwbridge.proto.registry import RESOLUTIONS, limit
from stubbox.history import INT32_MIN, build_tiles, etag_of
from stubbox.home import SERIES, Home

NOW = 1_755_777_777_000  # 2025-08-21 12:02:57 UTC
DAY = 86_400_000
HOUR = 3_600_000


def _fnv1a(data: bytes) -> str:
    h = 2166136261
    for b in data:
        h = (h ^ b) * 16777619 % 2**32
    return format(h, "08x")


def _columns(chunk: dict[str, Any]) -> list[list[int]]:
    n = len(chunk["data"]) // 4
    values = struct.unpack(f"<{n}i", chunk["data"])
    p = n // len(chunk["series"])
    return [list(values[s * p : (s + 1) * p]) for s in range(len(chunk["series"]))]


def _tiles(**kw: Any) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    args: dict[str, Any] = {
        "series": ["grid_w", "pv_w"],
        "res": Resolution.R_5M.value,
        "from_ms": NOW - DAY,
        "to_ms": NOW,
        "now_ms": NOW,
        "max_points": limit("history_points", "max"),
        "history_days": 30,
    }
    return build_tiles(Home(), **(args | kw))


def test_etag_is_fnv1a() -> None:
    assert etag_of(b"") == "811c9dc5"
    assert etag_of(b"a") == "e40c292c"
    assert etag_of(b"foobar") == "bf9cf968"
    chunks, _ = _tiles()
    assert all(c["etag"] == _fnv1a(c["data"]) for c in chunks)


def test_chunks_have_the_upstream_shape_and_geometry() -> None:
    chunks, end = _tiles()
    info = RESOLUTIONS[Resolution.R_5M]
    assert end == {"resActual": "5m", "gaps": []}
    assert [c["startMs"] for c in chunks] == sorted(c["startMs"] for c in chunks)
    for c in chunks:
        assert list(c) == [
            "tileId",
            "etag",
            "res",
            "startMs",
            "stepMs",
            "series",
            "data",
            "partial",
        ]
        stride = c["stepMs"] // info.step_ms
        assert c["tileId"] == f"5m/{stride}/{c['startMs'] // info.tile_span_ms}"
        assert c["startMs"] % info.tile_span_ms == 0
        points = info.tile_span_ms // c["stepMs"]
        assert len(c["data"]) == len(c["series"]) * points * 4
        assert c["partial"] is (c["startMs"] + info.tile_span_ms > NOW)
    assert chunks[0]["startMs"] <= NOW - DAY and chunks[-1]["partial"]
    assert sum(c["partial"] for c in chunks) == 1


def test_future_points_are_missing_and_past_points_real() -> None:
    chunks, _ = _tiles()
    last = chunks[-1]
    for column in _columns(last):
        for p, v in enumerate(column):
            start = last["startMs"] + p * last["stepMs"]
            if start + last["stepMs"] > NOW:
                assert v == INT32_MIN
            elif (start // HOUR) % 216 != 37:
                assert v != INT32_MIN
    grid = _columns(chunks[0])[0]
    assert grid[0] == Home().series_value("grid_w", chunks[0]["startMs"], 300_000)


def test_unknown_series_come_back_missing() -> None:
    chunks, _ = _tiles(series=["pv_w", "no_such_series"])
    for c in chunks:
        assert set(_columns(c)[1]) == {INT32_MIN}


@pytest.mark.parametrize(
    ("res", "days", "max_points", "want_res"),
    [
        ("5m", 1, 2000, "5m"),
        ("5m", 6, 2000, "5m"),
        ("5m", 6, 300, "1h"),
        ("5m", 29, 2000, "1h"),
        ("1h", 2, 2000, "1h"),
        ("1h", 700, 2000, "1h"),
        ("1h", 700, 200, "1h"),
        ("5m", 2, 50, "1h"),
    ],
)
def test_points_per_series_stay_under_max_points(
    res: str, days: int, max_points: int, want_res: str
) -> None:
    chunks, end = _tiles(
        series=["grid_w"],
        res=res,
        from_ms=NOW - days * DAY,
        max_points=max_points,
        history_days=730,
    )
    assert end["resActual"] == want_res
    total = sum(len(c["data"]) // 4 for c in chunks)
    assert total <= max_points
    strides = {c["stepMs"] for c in chunks}
    assert len(strides) == 1
    info = RESOLUTIONS[Resolution(want_res)]
    stride = strides.pop() // info.step_ms
    assert (info.tile_span_ms // info.step_ms) % stride == 0
    # the smallest such stride: one step finer would pass the cap
    finer = [k for k in range(1, stride) if (info.tile_span_ms // info.step_ms) % k == 0]
    if finer:
        assert len(chunks) * info.tile_span_ms // (info.step_ms * finer[-1]) > max_points


def test_history_before_the_cut_off_is_missing_and_reported_evicted() -> None:
    chunks, end = _tiles(res="1h", from_ms=NOW - 60 * DAY, history_days=10)
    cutoff = NOW - 10 * DAY
    assert end["gaps"] == [{"fromMs": chunks[0]["startMs"], "toMs": cutoff, "reason": "evicted"}]
    for c in chunks:
        for column in _columns(c):
            for p, v in enumerate(column):
                if c["startMs"] + (p + 1) * c["stepMs"] <= cutoff:
                    assert v == INT32_MIN
    five, end5 = _tiles(from_ms=NOW - 2 * DAY, history_days=1)
    assert end5["gaps"][0]["toMs"] == NOW - DAY
    (edge,) = [c for c in five if c["startMs"] <= NOW - DAY < c["startMs"] + 12 * HOUR]
    column = _columns(edge)[0]
    cut = -(-(NOW - DAY - edge["startMs"]) // edge["stepMs"])  # first point after the cut-off
    assert 0 < cut < len(column)
    assert set(column[:cut]) == {INT32_MIN} and INT32_MIN not in column[cut:]


def test_the_missing_hour_shows_as_missing_points() -> None:
    gap_hour = next(h for h in range(NOW // HOUR - 2, NOW // HOUR - 400, -1) if h % 216 == 37)
    chunks, _ = _tiles(from_ms=gap_hour * HOUR, to_ms=(gap_hour + 1) * HOUR)
    (chunk,) = chunks
    column = _columns(chunk)[0]
    first = (gap_hour * HOUR - chunk["startMs"]) // chunk["stepMs"]
    assert column[first : first + 12] == [INT32_MIN] * 12
    assert INT32_MIN not in column[:first] + column[first + 12 :]


def test_sixteen_series_fit_one_bulk_frame() -> None:
    series = [*SERIES, *(f"extra_{i}" for i in range(10))]
    for res, days in (("5m", 2), ("1h", 20)):
        chunks, _ = _tiles(series=series, res=res, from_ms=NOW - days * DAY)
        for c in chunks:
            assert len(Envelope(Answer.HIST_CHUNK.value, 4_000_000_000, c).encode()) < 16_000


def test_tiles_are_deterministic_and_closed_tiles_stable() -> None:
    a, _ = _tiles(from_ms=NOW - 3 * DAY)
    b, _ = build_tiles(
        Home(),
        series=["grid_w", "pv_w"],
        res="5m",
        from_ms=NOW - 3 * DAY,
        to_ms=NOW + HOUR,
        now_ms=NOW + HOUR,
        max_points=2000,
        history_days=30,
    )
    closed = {c["tileId"]: c["etag"] for c in a if not c["partial"]}
    assert closed and all(closed[c["tileId"]] == c["etag"] for c in b if c["tileId"] in closed)
    assert a == _tiles(from_ms=NOW - 3 * DAY)[0]


def test_empty_window_and_bad_res_raise() -> None:
    with pytest.raises(ValueError):
        _tiles(from_ms=NOW, to_ms=NOW + DAY)
    with pytest.raises(ValueError):
        _tiles(res="1d")
