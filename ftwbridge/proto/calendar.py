"""Wall-clock bucket edges of part G's `energy.get`: hours, days, ISO weeks and months in a
time zone, as ms since the epoch.

Pure: the caller passes the zone (a `datetime.tzinfo`, e.g. `zoneinfo.ZoneInfo(name)`), so this
module reads no clock and no files. Days start at local midnight (23, 24 or 25 hours long across
daylight-saving changes), weeks on Monday (ISO 8601), months on the 1st; an hour starts where the
local clock shows minute 0, so the repeated hour of an autumn change is two buckets.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, tzinfo
from typing import Final

HOUR_MS: Final = 3_600_000
BUCKETS: Final = ("hour", "day", "week", "month")
"""Part G's bucket names (agents.yaml `energy_buckets`)."""
SHORTEST_MS: Final = {
    "hour": HOUR_MS,
    "day": 23 * HOUR_MS,
    "week": 7 * 24 * HOUR_MS - HOUR_MS,
    "month": 28 * 24 * HOUR_MS - HOUR_MS,
}
"""The shortest a bucket can be, ms (a day or week with a spring change, a February)."""


def _local(t_ms: int, tz: tzinfo) -> datetime:
    return datetime.fromtimestamp(t_ms / 1000, UTC).astimezone(tz)


def _ms(local: datetime) -> int:
    return int(local.timestamp() * 1000)


def _midnight(year: int, month: int, day: int, tz: tzinfo) -> int:
    return _ms(datetime(year, month, day, tzinfo=tz))


def bucket_start(t_ms: int, bucket: str, tz: tzinfo) -> int:
    """Start (ms since the epoch) of the `bucket` that holds `t_ms`, in zone `tz`.

    Raises:
        ValueError: `bucket` is not one of `BUCKETS`.
    """
    local = _local(t_ms, tz)
    if bucket == "hour":
        offset = local.utcoffset() or timedelta(0)
        shift = int(offset.total_seconds() * 1000)
        return t_ms - (t_ms + shift) % HOUR_MS
    if bucket == "day":
        return _midnight(local.year, local.month, local.day, tz)
    if bucket == "week":
        monday = local.date() - timedelta(days=local.weekday())
        return _midnight(monday.year, monday.month, monday.day, tz)
    if bucket == "month":
        return _midnight(local.year, local.month, 1, tz)
    raise ValueError(f"not a bucket: {bucket!r}")


def next_start(start_ms: int, bucket: str, tz: tzinfo) -> int:
    """Start of the bucket after the one starting at `start_ms` (a bucket edge), ms.

    Raises:
        ValueError: `bucket` is not one of `BUCKETS`.
    """
    if bucket == "hour":
        return start_ms + HOUR_MS
    local = _local(start_ms, tz)
    if bucket in ("day", "week"):
        nxt = local.date() + timedelta(days=1 if bucket == "day" else 7)
        return _midnight(nxt.year, nxt.month, nxt.day, tz)
    if bucket == "month":
        year, month = (local.year + 1, 1) if local.month == 12 else (local.year, local.month + 1)
        return _midnight(year, month, 1, tz)
    raise ValueError(f"not a bucket: {bucket!r}")


def edges(from_ms: int, to_ms: int, bucket: str, tz: tzinfo) -> list[tuple[int, int]]:
    """The buckets [start, end) that [from_ms, to_ms) touches, rounded out to whole buckets."""
    out: list[tuple[int, int]] = []
    start = bucket_start(from_ms, bucket, tz)
    while start < to_ms:
        end = next_start(start, bucket, tz)
        out.append((start, end))
        start = end
    return out


def count_buckets(from_ms: int, to_ms: int, bucket: str, tz: tzinfo, most: int) -> int:
    """How many buckets [from_ms, to_ms) touches, counting no further than `most` + 1."""
    n, start = 0, bucket_start(from_ms, bucket, tz)
    while start < to_ms and n <= most:
        start = next_start(start, bucket, tz)
        n += 1
    return n
