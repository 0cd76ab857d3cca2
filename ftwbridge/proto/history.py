"""History tiles to points (PROTOCOL.md part A: int32 little-endian columns, INT32_MIN missing).

A `hist.chunk` body holds `startMs`, `stepMs`, `series` (names) and `data`: for each series in
order, one column of P int32 little-endian values (P = len(data) / 4 / len(series)); the value
INT32_MIN means missing. `unpack_history` turns chunks into `[time_ms, value | null]` points
per series, inside [from_ms, to_ms), and never returns more points per series than asked.
"""

from __future__ import annotations

import struct
from typing import Any, Final

from .clean import clean
from .errors import RemoteProtocolError

INT32_MIN: Final = -(2**31)


def _column_values(data: bytes, count: int) -> tuple[int, ...]:
    return struct.unpack(f"<{count}i", data)


def unpack_chunk(chunk: Any) -> dict[str, list[tuple[int, int | None]]]:
    """One `hist.chunk` body -> {series name: [(time_ms, value or None), ...]}.

    Raises:
        RemoteProtocolError: missing fields, or `data` whose length does not fit the series.
    """
    if not isinstance(chunk, dict):
        raise RemoteProtocolError("hist.chunk body is not a map")
    start, step, names, data = (chunk.get(k) for k in ("startMs", "stepMs", "series", "data"))
    if (
        not isinstance(start, int)
        or not isinstance(step, int)
        or step <= 0
        or not isinstance(names, list)
        or not names
        or not all(isinstance(n, str) for n in names)
        or not isinstance(data, bytes)
    ):
        raise RemoteProtocolError("hist.chunk is missing startMs, stepMs, series or data")
    width = len(names) * 4
    if len(data) % width:
        raise RemoteProtocolError("hist.chunk data does not fit its series")
    points = len(data) // width
    out: dict[str, list[tuple[int, int | None]]] = {}
    for i, name in enumerate(names):
        column = _column_values(data[i * points * 4 : (i + 1) * points * 4], points)
        out[clean(name)] = [
            (start + p * step, None if v == INT32_MIN else v) for p, v in enumerate(column)
        ]
    return out


def thin(points: list[tuple[int, int | None]], most: int) -> list[tuple[int, int | None]]:
    """At most `most` points, evenly spaced over the list (the first one kept)."""
    if most <= 0:
        return []
    if len(points) <= most:
        return points
    step = len(points) / most
    return [points[int(i * step)] for i in range(most)]


def unpack_history(
    chunks: list[Any], *, from_ms: int, to_ms: int, points: int
) -> dict[str, list[list[int | None]]]:
    """Every chunk of one answer -> {series: [[time_ms, value | null], ...]} within
    [from_ms, to_ms), in time order, at most `points` per series.

    Raises:
        RemoteProtocolError: as `unpack_chunk`.
    """
    merged: dict[str, dict[int, int | None]] = {}
    for chunk in chunks:
        for name, column in unpack_chunk(chunk).items():
            series = merged.setdefault(name, {})
            for t, v in column:
                if from_ms <= t < to_ms:
                    series[t] = v
    return {
        name: [[t, v] for t, v in thin(sorted(series.items()), points)]
        for name, series in merged.items()
    }
