"""What `/readyz` says: whether a balancer should send this instance traffic, and why not.

A balancer takes an instance out when `/readyz` is not 200. That is right for what only this
instance lacks (it is stopping) and wrong for an outage every instance shares: when the
database or the keys service does not answer for a few seconds, taking every instance out
turns "new sessions wait" into "nothing is served", although warm sessions (in memory, with
their tokens cached) need neither. So:

- `not ready` (503): the bridge is draining; or the store or the keys part has not answered
  once since the start (the instance has nothing warm yet, and may be misconfigured: a wrong
  `mesh_key`, a `keys_socket` nobody serves).
- `ready` (200), with `degraded: <why>` when the store or the keys part stops answering after
  that: warm sessions go on; what needs the part (new sessions, tokens not cached) is refused
  in words until it answers again.
- `ready, degraded` too when the state's disk is full: everything that only reads is served
  (every tool, new sessions included), what must write (a sign-in, a token) is refused in
  words until space returns, and a second instance would have the same disk
  (docs/operations.md, "A full disk").

`Readiness.judge` is pure: the caller runs the checks (each within `CHECK_S`, together, so
the answer comes within a balancer's check timeout) and passes their results in.
"""

from __future__ import annotations

from dataclasses import dataclass

CHECK_S = 0.5
"""How long each check may take, seconds; the checks run side by side, so `/readyz` answers
within about this (HAProxy's check times out after its `inter`, 1 s in `make cluster`)."""


@dataclass(frozen=True, slots=True)
class Verdict:
    """`/readyz`'s answer: `ready` (HTTP 200, else 503) and `why` (None when all is well, else
    one sentence: what is missing)."""

    ready: bool
    why: str | None = None

    def text(self) -> str:
        """The body of `/readyz`: `ready`, `ready, degraded: <why>` or `not ready: <why>`."""
        if self.ready:
            return "ready" if self.why is None else f"ready, degraded: {self.why}"
        return f"not ready: {self.why}"


class Readiness:
    """Remembers which parts have answered once since the start, and judges each check."""

    def __init__(self) -> None:
        self._answered = {"store": False, "keys": False}

    def judge(
        self, *, draining: bool, store: str | None, keys: str | None, disk: str | None = None
    ) -> Verdict:
        """The verdict for one `/readyz`.

        Args:
            draining: the bridge is stopping.
            store, keys: why the store (the keys part) did not answer this time, or None when
                it did.
            disk: why the state's disk is full (`StateWatch.disk_full`), or None.
        """
        if draining:
            return Verdict(False, "draining: the bridge is stopping")
        problems = {"store": store, "keys": keys}
        for part, problem in problems.items():
            if problem is None:
                self._answered[part] = True
        why = "; ".join(p for p in (*problems.values(), disk) if p is not None) or None
        if why is None:
            return Verdict(True)
        if not all(self._answered.values()):
            return Verdict(False, why)
        if store is None and keys is None:
            return Verdict(True, why)
        return Verdict(True, why + "; warm sessions are still served")
