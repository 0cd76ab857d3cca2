"""History tiles to points (PROTOCOL.md part A: int32 little-endian columns, INT32_MIN missing).

A `hist.chunk` body holds `startMs`, `stepMs`, `series` (names) and `data`: for each series in
order, one column of P int32 little-endian values (P = len(data) / 4 / len(series)); the value
INT32_MIN means missing. Each value is the box's mean over [time, time + stepMs).

`unpack_history` turns the chunks of one answer into `[time_ms, value | null]` points per series
inside [from_ms, to_ms), never more per series than asked. When the range holds more of the
box's samples than that, it thins honestly: each point is the mean of the
samples of a bucket k box steps wide, its `step_ms` is that real width, so the energy
sum(value x step_ms) over the points equals the box's own sum(value x stepMs) over the same
time, within the rounding of a mean to a whole W (at most 0.5 W x step_ms per point).

How the buckets are laid (`_buckets`):
  1. Only closed samples are thinned: the newest bucket ends where the newest sample that ends
     by `to_ms` ends, so a sample the box has not finished (it sends it missing, or as the mean
     of the part that has closed) is never stretched over a whole bucket.
  2. k = ceil(M / points) for the M closed samples from the first one at or after `from_ms`;
     buckets of k samples are laid back from the newest end. When M is not a multiple of k, the
     oldest bucket reaches before `from_ms` over samples the box sent anyway (its tiles are
     aligned to 12 h or 7 days, so they start before the range); if any of those is absent or
     missing, that bucket is left out instead, so no point stands for time it lacks.
  3. A bucket's value is the mean of its samples that are present, rounded to a whole unit (W,
     or permille for `battery_soc`); null when none is. Samples missing inside the range are
     the box's own gaps (`hist.end` `gaps` names evicted ones).
"""

from __future__ import annotations

import struct
from bisect import bisect_left
from dataclasses import dataclass
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


Point = list[int | None]
"""[time_ms, value or None]: the start of the point's interval, ms since the epoch."""


@dataclass(frozen=True, slots=True)
class History:
    """One answer's points.

    Attributes:
        series: {name: [[time_ms, value | None], ...]} in time order.
        step_ms: each point's width in ms (the box's `stepMs`, or k times it when thinned);
            None when the answer held no chunk.
        source_step_ms: the box's `stepMs` the points were built from (None without chunks).
        from_ms, to_ms: the time the points cover, [from_ms, to_ms), ms since the epoch: the
            range asked when the points are the box's own; when thinned, the first bucket's
            start and the last one's end.
    """

    series: dict[str, list[Point]]
    step_ms: int | None
    source_step_ms: int | None
    from_ms: int
    to_ms: int


def _merge(chunks: list[Any]) -> tuple[dict[str, dict[int, int | None]], int | None]:
    """Every sample of every chunk by series and time, and the answer's one step (ms)."""
    merged: dict[str, dict[int, int | None]] = {}
    steps: set[int] = set()
    for chunk in chunks:
        for name, column in unpack_chunk(chunk).items():
            merged.setdefault(name, {}).update(column)
        steps.add(chunk["stepMs"])
    if len(steps) > 1:
        raise RemoteProtocolError("hist.chunk bodies of one answer differ in stepMs")
    return merged, (steps.pop() if steps else None)


class _Present:
    """One series' present (non-missing) samples, in time order, with prefix sums, so a
    bucket's count and sum cost two bisections whatever the times a box sends (a hostile one
    could otherwise make a bucket span billions of empty steps)."""

    def __init__(self, column: dict[int, int | None]) -> None:
        pairs = sorted((t, v) for t, v in column.items() if v is not None)
        self.times = [t for t, _ in pairs]
        self.sums = [0]
        for _, v in pairs:
            self.sums.append(self.sums[-1] + v)

    def count_sum(self, lo: int, hi: int) -> tuple[int, int]:
        """(how many, their sum) of the samples starting in [lo, hi)."""
        i, j = bisect_left(self.times, lo), bisect_left(self.times, hi)
        return j - i, self.sums[j] - self.sums[i]

    def mean(self, lo: int, hi: int) -> int | None:
        """The mean of the samples starting in [lo, hi), to a whole unit; None without any."""
        n, total = self.count_sum(lo, hi)
        return round(total / n) if n else None


def _buckets(
    present: dict[str, _Present], times: list[int], step: int, span: tuple[int, int], points: int
) -> tuple[list[int], int]:
    """(bucket start times in ms, k) for thinning to at most `points` buckets, each `k * step`
    wide and whole (module docstring, steps 1 and 2); no starts when nothing closed is in
    range. `times`: every sample time the box sent, sorted; `span`: (from_ms, to_ms)."""
    from_ms, to_ms = span
    closed = [t for t in times if from_ms <= t and t + step <= to_ms]
    if not closed:
        return [], 1
    end = closed[-1] + step
    first = from_ms + (closed[0] - from_ms) % step  # the first grid time at or after from_ms
    count = (end - first) // step
    k = max(1, -(-count // max(1, points)))
    n = -(-count // k)
    starts = [end - (n - j) * k * step for j in range(n)]
    if starts and starts[0] < first:  # the oldest bucket reaches before the range
        need = (first - starts[0]) // step
        lived = [p for p in present.values() if p.times]
        if not all(p.count_sum(starts[0], first)[0] == need for p in lived):
            starts = starts[1:]
    return starts, k


def unpack_history(chunks: list[Any], *, from_ms: int, to_ms: int, points: int) -> History:
    """Every chunk of one answer -> at most `points` points per series within [from_ms, to_ms),
    in time order; thinned by bucket means when the range holds more (module docstring).

    Args:
        chunks: the `hist.chunk` bodies of one answer, as the box sent them.
        from_ms, to_ms: the range asked, ms since the epoch.
        points: the most points per series (>= 1).

    Raises:
        RemoteProtocolError: as `unpack_chunk`, or chunks of one answer with different steps.
    """
    merged, step = _merge(chunks)
    if step is None:
        return History({}, None, None, from_ms, to_ms)
    inside = {
        name: sorted((t, v) for t, v in column.items() if from_ms <= t < to_ms)
        for name, column in merged.items()
    }
    if all(len(column) <= points for column in inside.values()):
        return History(
            {name: [[t, v] for t, v in column] for name, column in inside.items()},
            step,
            step,
            from_ms,
            to_ms,
        )
    present = {name: _Present(column) for name, column in merged.items()}
    times = sorted({t for column in merged.values() for t in column})
    starts, k = _buckets(present, times, step, (from_ms, to_ms), points)
    if not starts:
        return History({name: [] for name in merged}, step, step, from_ms, to_ms)
    width = k * step
    return History(
        {name: [[b, p.mean(b, b + width)] for b in starts] for name, p in present.items()},
        width,
        step,
        starts[0],
        starts[-1] + width,
    )
