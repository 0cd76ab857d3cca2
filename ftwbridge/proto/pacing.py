"""Token-bucket arithmetic (sans-I/O: `now` is always an argument, in seconds).

Used for per-home pacing of agents' calls and bytes, the door's per-home limits, and the
per-agent HTTP limit (PROTOCOL.md, bridge limits table and part C).
"""

from __future__ import annotations

from dataclasses import dataclass, field

_EPSILON = 1e-9
"""Token shortfalls below this are float rounding (0.75/s for 4/3 s), not a wait."""


@dataclass(slots=True)
class TokenBucket:
    """A bucket holding up to `burst` tokens, refilling at `rate` tokens per second.

    The bucket starts full at the first `now` it sees. Times are monotonic seconds (float).
    """

    burst: float
    rate: float
    _tokens: float = field(init=False)
    _stamp: float | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        if self.burst <= 0 or self.rate <= 0:
            raise ValueError("burst and rate must be positive")
        self._tokens = self.burst

    def _refill(self, now: float) -> None:
        # `min(burst, ...)` written as a comparison: the builtin's call was most of a refill
        stamp = self._stamp
        if stamp is None or now > stamp:
            if stamp is not None:
                tokens = self._tokens + (now - stamp) * self.rate
                self._tokens = tokens if tokens < self.burst else self.burst
            self._stamp = now

    def tokens(self, now: float) -> float:
        """Tokens available at `now`."""
        self._refill(now)
        return self._tokens

    def wait_s(self, now: float, cost: float = 1.0) -> float:
        """Seconds from `now` until `cost` tokens are available (0.0 when they are).

        A cost above `burst` is measured against a full bucket going negative, so large
        answers are still paced rather than refused forever.
        """
        self._refill(now)
        burst = self.burst
        need = (burst if burst < cost else cost) - self._tokens
        return 0.0 if need <= _EPSILON else need / self.rate

    def ready(self, now: float, cost: float = 1.0) -> bool:
        """Whether `wait_s(now, cost)` is 0, the bucket refilled to `now` (the check alone:
        `debit` then takes the tokens at the same `now`)."""
        self._refill(now)
        burst = self.burst
        return (burst if burst < cost else cost) - self._tokens <= _EPSILON

    def debit(self, cost: float) -> None:
        """Take `cost` tokens right after `ready` said yes at the same `now` (no refill: the
        bucket is already refilled to it), leaving any debt as `charge` does."""
        self._tokens -= cost

    def try_take(self, now: float, cost: float = 1.0) -> bool:
        """Take `cost` tokens at `now` if `wait_s` is 0; returns whether it did."""
        if not self.ready(now, cost):
            return False
        self._tokens -= cost
        return True

    def charge(self, now: float, cost: float) -> None:
        """Take `cost` tokens even if that leaves the bucket in debt (bytes already moved)."""
        self._refill(now)
        self._tokens -= cost
