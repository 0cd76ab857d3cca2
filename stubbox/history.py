"""History tiles for `hist.query`: the upstream geometry, packing and etag (PROTOCOL.md part A).

Planning follows the upstream `planQuery` (srcfl/ftw-webapp `src/lib/protocol/history.ts`, ported
term for term in srcfl/ftw `go/internal/appproto/history.go`) so that bridge and box name the same
tiles: keep the requested resolution or move to a coarser one while the tile-aligned span at
stride 1 holds more than `max_points` points, then take the smallest stride dividing the points
per tile that brings the aligned span under `max_points`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, Final, Protocol

from ftwbridge.proto.names import Resolution
from ftwbridge.proto.registry import RESOLUTIONS, limit

DAY_MS: Final = 86_400_000
INT32_MIN: Final = -(2**31)
"""A missing point in `data`."""
INT32_MAX: Final = 2**31 - 1
ORDER: Final = (Resolution.R_5M, Resolution.R_1H)
"""Resolutions fine to coarse: the order the box moves along."""


class SeriesSource(Protocol):
    """What the tiles read: `stubbox.home.Home` fits."""

    def series_value(self, series: str, t_ms: int, step_ms: int) -> int | None:
        """Mean of `series` over wall-clock [t_ms, t_ms + step_ms), or None when missing."""
        ...


def etag_of(data: bytes) -> str:
    """FNV-1a 32-bit over `data`, as 8 lowercase hex digits (the upstream etag)."""
    h = 0x811C9DC5
    for byte in data:
        h = ((h ^ byte) * 0x01000193) & 0xFFFFFFFF
    return f"{h:08x}"


def _aligned_span(res: Resolution, from_ms: int, to_ms: int) -> tuple[int, int]:
    """(first tile start, tile-aligned span) covering wall-clock [from_ms, to_ms), ms."""
    span = RESOLUTIONS[res].tile_span_ms
    first = from_ms // span * span
    last = max(from_ms, to_ms - 1) // span * span
    return first, last + span - first


def plan_query(
    res: Resolution, from_ms: int, to_ms: int, max_points: int
) -> tuple[Resolution, int]:
    """(resolution served, stride) for a query, as upstream `planQuery` decides them.

    When even the coarsest resolution at its largest stride cannot fit (a window of more than
    `max_points` weeks), the largest stride is used and the cap is passed.
    """
    cap = max(1, max_points)
    chosen = ORDER[-1]
    for candidate in ORDER[ORDER.index(res) :]:
        chosen = candidate
        if _aligned_span(candidate, from_ms, to_ms)[1] <= cap * RESOLUTIONS[candidate].step_ms:
            break
    info = RESOLUTIONS[chosen]
    total = _aligned_span(chosen, from_ms, to_ms)[1]
    per_tile = info.tile_span_ms // info.step_ms
    strides = [k for k in range(1, per_tile + 1) if per_tile % k == 0]
    stride = next((k for k in strides if total <= cap * info.step_ms * k), per_tile)
    return chosen, stride


@dataclass(frozen=True, slots=True)
class _Plan:
    """A history query's tiles: the resolution chosen and its stride, the step and tile span
    (ms), the aligned window's first tile start and length (ms), points per tile, the
    grant's cut-off and the buckets inside it (ms since the epoch)."""

    chosen: Resolution
    stride: int
    step_ms: int
    span: int
    first: int
    total: int
    points: int
    cutoff: int
    first_bucket: int
    last_bucket_end: int


def _plan(
    res: Resolution, from_ms: int, to_ms: int, now_ms: int, max_points: int, history_days: int
) -> _Plan:
    top = limit("history_points", "max")
    cap = top if max_points <= 0 else min(max_points, top)
    chosen, stride = plan_query(res, from_ms, to_ms, cap)
    info = RESOLUTIONS[chosen]
    step_ms, span = info.step_ms, info.tile_span_ms
    first, total = _aligned_span(chosen, from_ms, to_ms)
    cutoff = now_ms - min(info.retention_days, history_days) * DAY_MS
    return _Plan(
        chosen=chosen,
        stride=stride,
        step_ms=step_ms,
        span=span,
        first=first,
        total=total,
        points=span // step_ms // stride,
        cutoff=cutoff,
        first_bucket=-(-cutoff // step_ms) * step_ms,  # buckets starting at or after the cut-off
        last_bucket_end=now_ms // step_ms * step_ms,  # buckets closed by now
    )


def _tile_data(home: SeriesSource, series: list[str], start: int, plan: _Plan) -> bytes:
    """One tile's `data`: each series' point means, int32 little-endian, column-major,
    `INT32_MIN` for missing."""
    width = plan.step_ms * plan.stride
    windows = [
        (
            max(start + p * width, plan.first_bucket),
            min(start + (p + 1) * width, plan.last_bucket_end),
        )
        for p in range(plan.points)
    ]
    values: list[int] = []
    for name in series:
        for lo, hi in windows:
            v = home.series_value(name, lo, hi - lo) if hi > lo else None
            values.append(INT32_MIN if v is None else max(INT32_MIN + 1, min(INT32_MAX, v)))
    return struct.pack(f"<{len(values)}i", *values)


def build_tiles(
    home: SeriesSource,
    *,
    series: list[str],
    res: str,
    from_ms: int,
    to_ms: int,
    now_ms: int,
    max_points: int,
    history_days: int,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The `hist.chunk` bodies (one per tile, in time order) and the `hist.end` body of a query.

    Args:
        home: gives each point's mean (W, or permille for `battery_soc`).
        series: column names, in `data` order; unknown names come back all missing.
        res: "5m" or "1h", the resolution asked for.
        from_ms, to_ms: the wall-clock window [from_ms, to_ms); `to_ms` is clamped to `now_ms`.
        now_ms: the box's wall clock.
        max_points: points per series the tile-aligned window may hold; <= 0 means the
            contract's maximum (2000), and larger values are cut to it.
        history_days: how far back the grant may see, days.

    Returns:
        Chunks `{tileId, etag, res, startMs, stepMs, series, data, partial}` with `data` int32
        little-endian, column-major, `INT32_MIN` for missing; and `{resActual, gaps}`. A point
        is the mean of the stored buckets (5 min or 1 h) in it that closed by `now_ms` and
        start at or after the cut-off (now minus retention, or minus `history_days` if later);
        a window starting before the cut-off is reported as one gap, reason "evicted".

    Raises:
        ValueError: `res` is not a resolution, or the window is empty after clamping.
    """
    to_ms = min(to_ms, now_ms)
    if to_ms <= from_ms:
        raise ValueError("empty history window")
    plan = _plan(Resolution(res), from_ms, to_ms, now_ms, max_points, history_days)
    chunks: list[dict[str, Any]] = []
    for start in range(plan.first, plan.first + plan.total, plan.span):
        data = _tile_data(home, series, start, plan)
        chunks.append(
            {
                "tileId": f"{plan.chosen.value}/{plan.stride}/{start // plan.span}",
                "etag": etag_of(data),
                "res": plan.chosen.value,
                "startMs": start,
                "stepMs": plan.step_ms * plan.stride,
                "series": list(series),
                "data": data,
                "partial": start + plan.span > now_ms,
            }
        )
    first, cutoff, chosen = plan.first, plan.cutoff, plan.chosen
    gaps = []
    if first < cutoff:
        gaps.append({"fromMs": first, "toMs": min(cutoff, to_ms), "reason": "evicted"})
    return chunks, {"resActual": chosen.value, "gaps": gaps}
