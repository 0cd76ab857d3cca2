"""Per-home pacing of agents' calls (PROTOCOL.md, bridge limits table).

Two token buckets per home: calls (15 in a row, then 0.75 per second, so no rolling minute
holds more than the box's 60 reads) and bytes (a quarter of the door's limits: 1 MiB, then
128 KiB/s), the latter charged with what each answer brought back. A call reserves its token
when it arrives, so calls keep their order per home; its wait is the honest time until that
token exists. A call that would wait longer than `pace_wait_s` takes no token and is refused
`E_RATE_LIMITED {retryAfterMs}` with that wait. A caller cancelled while it waits gives its
token back.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import trio

from ftwbridge.config import Config
from ftwbridge.proto.names import Code
from ftwbridge.proto.pacing import TokenBucket
from ftwbridge.proto.refusal import Refusal


@dataclass(slots=True)
class _Buckets:
    calls: TokenBucket
    nbytes: TokenBucket


class HomePacer:
    """The pacing buckets of every home, on trio's clock (seconds).

    Args:
        config: `pace_calls_burst`, `pace_calls_per_s`, `pace_bytes_burst`,
            `pace_bytes_per_s`, `pace_wait_s`.
    """

    def __init__(self, config: Config) -> None:
        self._config = config
        self._homes: dict[str, _Buckets] = {}
        self.refusals = 0

    def _buckets(self, home: str) -> _Buckets:
        b = self._homes.get(home)
        if b is None:
            c = self._config
            b = _Buckets(
                TokenBucket(c.pace_calls_burst, c.pace_calls_per_s),
                TokenBucket(c.pace_bytes_burst, c.pace_bytes_per_s),
            )
            self._homes[home] = b
        return b

    def wait_s(self, home: str) -> float:
        """Seconds a call arriving now at `home` would wait (for a `retryAfterMs` hint)."""
        b = self._buckets(home)
        now = trio.current_time()
        return max(b.calls.wait_s(now), b.nbytes.wait_s(now, 1))

    async def turn(self, home: str, *, max_wait_s: float | None = None) -> float:
        """Wait for this call's turn at `home`; returns the seconds waited. `max_wait_s`
        (seconds) replaces `pace_wait_s` as the longest wait (a command's: the call deadline).

        Raises:
            Refusal: `E_RATE_LIMITED {retryAfterMs}` when the wait would pass the longest.
        """
        b = self._buckets(home)
        now = trio.current_time()
        wait = max(b.calls.wait_s(now), b.nbytes.wait_s(now, 1))
        if wait > (self._config.pace_wait_s if max_wait_s is None else max_wait_s):
            self.refusals += 1
            retry_ms = math.ceil(wait * 1000)
            raise Refusal(Code.E_RATE_LIMITED, {"retryAfterMs": retry_ms}, retry_ms)
        b.calls.charge(now, 1)  # reserve: later arrivals wait behind this one
        if wait <= 0:
            return 0.0
        try:
            await trio.sleep(wait)
        except trio.Cancelled:
            b.calls.charge(trio.current_time(), -1)  # give the reserved token back
            raise
        return wait

    def charge_bytes(self, home: str, nbytes: int) -> None:
        """Charge what an answer brought back (bytes) to `home`'s byte bucket."""
        self._buckets(home).nbytes.charge(trio.current_time(), nbytes)
