"""The per-agent request limit at `/mcp` (PROTOCOL.md "Bridge limits": 30 requests in a row,
then 10 per second), sans-I/O: times are trio seconds passed in."""

from __future__ import annotations

import math
from typing import Final

from ftwbridge.proto.pacing import TokenBucket

SWEEP_BUCKETS_AT: Final = 1024
"""New agents between two sweeps of refilled buckets (`AgentRequests`)."""


class AgentRequests:
    """One token bucket per agent (home, agent key).

    A bucket that has refilled is the same as none, so refilled buckets are forgotten once
    `SWEEP_BUCKETS_AT` new agents have come since the last sweep: memory stays bounded by
    the agents of the last few seconds, and a sweep costs one look per bucket every thousand
    new agents.

    Args:
        burst: requests in a row. per_s: requests per second after that.
    """

    def __init__(self, burst: float, per_s: float) -> None:
        self._burst = burst
        self._per_s = per_s
        self._buckets: dict[tuple[str, bytes], TokenBucket] = {}
        self._sweep_at = SWEEP_BUCKETS_AT

    def take(self, key: tuple[str, bytes], now: float) -> int | None:
        """Count one request of agent `key` at `now`: None when it may go, else the ms until
        it could (the request is then refused and not counted)."""
        bucket = self._buckets.get(key)
        if bucket is None:
            self._sweep(now)
            bucket = self._buckets[key] = TokenBucket(self._burst, self._per_s)
        if bucket.try_take(now):
            return None
        return math.ceil(bucket.wait_s(now) * 1000)

    def _sweep(self, now: float) -> None:
        if len(self._buckets) < self._sweep_at:
            return
        for key, bucket in list(self._buckets.items()):
            if bucket.tokens(now) >= self._burst:
                del self._buckets[key]
        self._sweep_at = len(self._buckets) + SWEEP_BUCKETS_AT

    def __len__(self) -> int:
        """Agents with a bucket kept."""
        return len(self._buckets)
