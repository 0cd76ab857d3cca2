"""`history_query` thins honestly: asked for fewer points than the range
holds, each point is the mean of the box samples it covers and `stepMs` is its real width, so
energy as sum(value x stepMs) is the box's own, within the rounding of a mean to a whole W.

The box side is the stub home's real tiles (`stubbox.history.build_tiles`), asked exactly as
the tool asks (`ToolSpec.box_requests`), and the result is the tool's own (`ToolSpec.shape`).
"""

from __future__ import annotations

import struct
from typing import Any

import pytest

from ftwbridge.mcp.tools import TOOLS_BY_NAME, ToolContext
from ftwbridge.proto.errors import RemoteProtocolError
from ftwbridge.proto.history import INT32_MIN, unpack_chunk, unpack_history
from ftwbridge.proto.session import Reply
from stubbox.history import build_tiles
from stubbox.home import Home

NOW = 1_755_777_777_000  # 2025-08-21 12:02:57 UTC
HOUR = 3_600_000
DAY = 24 * HOUR
SPEC = TOOLS_BY_NAME["history_query"]


def chunk(start: int, step: int, columns: dict[str, list[int | None]]) -> dict[str, Any]:
    values = [INT32_MIN if v is None else v for col in columns.values() for v in col]
    return {
        "startMs": start,
        "stepMs": step,
        "series": list(columns),
        "data": struct.pack(f"<{len(values)}i", *values),
    }


def test_buckets_are_means_and_step_is_their_width() -> None:
    step = 300_000
    c = chunk(0, step, {"pv_w": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]})
    h = unpack_history([c], from_ms=0, to_ms=12 * step, points=4)
    assert h.step_ms == 3 * step and h.source_step_ms == step
    assert h.series["pv_w"] == [[0, 2], [3 * step, 5], [6 * step, 8], [9 * step, 11]]
    assert (h.from_ms, h.to_ms) == (0, 12 * step)
    # asked for as many as there are: the box's own points, untouched
    whole = unpack_history([c], from_ms=0, to_ms=12 * step, points=12)
    assert whole.step_ms == step and len(whole.series["pv_w"]) == 12


def test_an_unfinished_sample_is_not_stretched_over_a_bucket() -> None:
    step = 300_000
    c = chunk(0, step, {"pv_w": [10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 500]})
    h = unpack_history([c], from_ms=0, to_ms=11 * step + 1, points=5)  # the 12th is open
    assert all(v == 10 for _, v in h.series["pv_w"])
    assert h.to_ms == 11 * step and len(h.series["pv_w"]) <= 5


def test_the_oldest_bucket_reaches_back_only_over_samples_the_box_sent() -> None:
    step = 300_000
    # 10 samples in range, 4 points: k = 3, four buckets reach two samples before the range
    full = chunk(0, step, {"pv_w": [100] * 12})
    h = unpack_history([full], from_ms=2 * step, to_ms=12 * step, points=4)
    assert h.from_ms == 0 and h.step_ms == 3 * step and len(h.series["pv_w"]) == 4
    # before the range the box has nothing: that bucket is left out, not made up
    gap = chunk(0, step, {"pv_w": [None, None, *[100] * 10]})
    h = unpack_history([gap], from_ms=2 * step, to_ms=12 * step, points=4)
    assert h.from_ms == 3 * step and len(h.series["pv_w"]) == 3
    assert all(v == 100 for _, v in h.series["pv_w"])


def test_missing_samples_inside_a_bucket_are_left_out_of_its_mean() -> None:
    step = 300_000
    c = chunk(0, step, {"pv_w": [10, None, 30, None, None, None]})
    h = unpack_history([c], from_ms=0, to_ms=6 * step, points=2)
    assert h.series["pv_w"] == [[0, 20], [3 * step, None]]


def test_chunks_with_different_steps_are_refused() -> None:
    a, b = chunk(0, 300_000, {"x": [1, 2]}), chunk(600_000, 3_600_000, {"x": [1]})
    with pytest.raises(RemoteProtocolError):
        unpack_history([a, b], from_ms=0, to_ms=10**9, points=1)


def _box_samples(chunks: list[dict[str, Any]], name: str) -> tuple[dict[int, int | None], int]:
    samples: dict[int, int | None] = {}
    for c in chunks:
        samples.update(unpack_chunk(c)[name])
    return samples, chunks[0]["stepMs"]


@pytest.mark.parametrize("span", ["24h", "7d", "30d"])
@pytest.mark.parametrize("points", [1, 7, 24, 100, 200, 500])
def test_energy_matches_the_stub_homes_own_series(span: str, points: int) -> None:
    home = Home(seed=2)
    args = SPEC.args.model_validate(
        {"range": span, "series": ["grid_w", "pv_w", "battery_w", "load_w"], "points": points}
    )
    [(_read, body)] = SPEC.box_requests(args, NOW)
    chunks, end = build_tiles(
        home,
        series=body["series"],
        res=body["res"],
        from_ms=body["fromMs"],
        to_ms=body["toMs"],
        now_ms=NOW,
        max_points=body["maxPoints"],
        history_days=30,
    )
    result = SPEC.shape(args, [Reply(1, "hist.end", end, tuple(chunks))], ToolContext(NOW))
    width, span_ms = result["stepMs"], args.span_ms()
    for name, got in result["series"].items():
        samples, step = _box_samples(chunks, name)
        assert result["sourceStepMs"] == step
        in_range = [t for t in samples if NOW - span_ms <= t < NOW]
        assert len(got) <= points
        if len(in_range) <= points:  # the box's own points, untouched
            assert width == step and [t for t, _ in got] == sorted(in_range)
            continue
        # thinned: whole buckets of k samples, laid edge to edge over the range
        k = width // step
        assert width == k * step and k >= 1
        assert [t for t, _ in got] == list(range(result["fromMs"], result["toMs"], width))
        assert abs(result["fromMs"] - (NOW - span_ms)) < width  # the range, to one bucket
        assert NOW - 2 * step < result["toMs"] <= NOW  # closed samples only
        ours = box = 0
        for t, v in got:
            covered = [samples.get(t + i * step) for i in range(k)]
            present = [x for x in covered if x is not None]
            if not present:
                assert v is None
                continue
            assert v == round(sum(present) / len(present))  # the mean of what it covers
            if len(present) == k:
                ours += v * width
                box += sum(present) * step
                assert abs(v * width - sum(present) * step) <= width / 2
        # energy from points x stepMs is the box's, within half a W over the covered time
        assert abs(ours - box) <= (result["toMs"] - result["fromMs"]) / 2, (name, ours, box)
        assert box != 0 or points == 1  # one bucket may hold the missing hour


def test_energy_over_the_whole_day_in_watt_hours() -> None:
    """The figure a person reads: a day's solar energy from 24 hourly points equals the one
    from the box's 288 five-minute samples over the same hours, to well under 1 Wh."""
    home = Home(seed=5)
    args = SPEC.args.model_validate({"range": "24h", "series": ["pv_w"], "points": 24})
    [(_read, body)] = SPEC.box_requests(args, NOW)
    chunks, end = build_tiles(
        home,
        series=["pv_w"],
        res=body["res"],
        from_ms=body["fromMs"],
        to_ms=body["toMs"],
        now_ms=NOW,
        max_points=body["maxPoints"],
        history_days=30,
    )
    result = SPEC.shape(args, [Reply(1, "hist.end", end, tuple(chunks))], ToolContext(NOW))
    samples, step = _box_samples(chunks, "pv_w")
    ours_wh = sum(v * result["stepMs"] for _, v in result["series"]["pv_w"] if v) / HOUR
    box_wh = (
        sum(
            v * step
            for t, v in samples.items()
            if v is not None and result["fromMs"] <= t < result["toMs"]
        )
        / HOUR
    )
    assert result["stepMs"] == HOUR and len(result["series"]["pv_w"]) == 24
    assert box_wh > 1000 and abs(ours_wh - box_wh) <= 0.5 * 24


def test_a_box_that_spreads_samples_far_apart_costs_no_more_than_its_samples() -> None:
    """Buckets are summed over the samples sent, never stepped through: two 1 ms samples a
    year apart make one bucket a year wide, at once."""
    year = 365 * DAY
    a, b = chunk(0, 1, {"x": [4, 6]}), chunk(year, 1, {"x": [8, 10]})
    h = unpack_history([a, b], from_ms=0, to_ms=year + 2, points=1)
    assert h.step_ms == year + 2 and h.series["x"] == [[0, 7]]
