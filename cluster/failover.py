"""How many of a cluster's calls take the hop in the minute after the instance holding a home
is killed (docs/operations.md, "Calls at the holder"): its homes' boxes redial through HAProxy
and land at the survivors, and HAProxy's learned map must learn their new holders from the
answers.

`after_kill` is what `bench/cluster_affinity.py --after-kill` prints: in steady state (after
`cluster.hops.hop_share`), `kill -9` of the instance holding the first home, then every home's
assistant calls through HAProxy, one call after another on one kept-alive connection with a
short pause between them, for a minute. The instances' own count of forwarded requests
(`cluster.hops.forwarded`, the survivors') is read every second, so the calls and the hops
are counted per window of 10 s after the kill, and the last hop is placed within a second.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import httpx2
import trio

from .hops import CALL_S, call_body, forwarded

if TYPE_CHECKING:
    from .rig import Cluster

AFTER_S = 60.0
"""How long the calls are counted after the kill, seconds."""
WINDOW_S = 10.0
"""One window of the count, seconds."""
PAUSE_S = 0.5
"""The pause between two calls of one home's assistant, seconds."""
SAMPLE_S = 1.0
"""How often the instances' count of forwarded requests is read, seconds."""


@dataclass(frozen=True, slots=True)
class Window:
    """The calls answered from `start_s` to `start_s + WINDOW_S` seconds after the kill:
    `calls` in all, `hops` forwarded by the instance they entered, `failed` answered in words
    (a tool error such as "the home is offline", or HAProxy's own 5xx) or not at all."""

    start_s: float
    calls: int
    hops: int
    failed: int

    @property
    def share(self) -> float:
        """The fraction of the window's calls that took a hop, 0 to 1."""
        return self.hops / self.calls if self.calls else 0.0


@dataclass(frozen=True, slots=True)
class Failover:
    """The minute after `victim` was killed: the `moved` homes it held, when the last of
    them was held by a survivor in the directory (`held_again_s`, seconds after the kill;
    None: not within the minute), when the last hop was counted (`last_hop_s`, to the
    second; None: no hop at all), and the `windows`."""

    victim: str
    moved: list[str]
    held_again_s: float | None
    last_hop_s: float | None
    windows: list[Window] = field(default_factory=list)

    def lines(self) -> list[str]:
        """The figures in words, one line per window (what the bench prints)."""
        held = (
            "not within the minute" if self.held_again_s is None else f"{self.held_again_s:.1f} s"
        )
        last = "none" if self.last_hop_s is None else f"{self.last_hop_s:.0f} s after the kill"
        out = [
            f"after kill -9 of {self.victim}, the holder of {len(self.moved)} homes:"
            f" held by a survivor again after {held}; the last hop {last}"
        ]
        for w in self.windows:
            out.append(
                f"  {w.start_s:2.0f}-{w.start_s + WINDOW_S:2.0f} s: {100 * w.share:.1f} % of calls"
                f" took a hop ({w.hops} of {w.calls}), {w.failed} answered in words"
            )
        return out


async def _keep_calling(
    cluster: Cluster, token: str, until: float, answers: list[tuple[float, bool]]
) -> None:
    """Calls with `token` through HAProxy, one after another on one connection with
    `PAUSE_S` between them, until trio time `until`; each answer's trio time and whether it
    was a result (200, no tool error) go to `answers`."""
    async with httpx2.AsyncClient(timeout=CALL_S) as http:
        n = 0
        while trio.current_time() < until:
            n += 1
            body, headers = call_body(n)
            headers["authorization"] = f"Bearer {token}"
            try:
                resp = await http.post(cluster.url, content=body, headers=headers)
                ok = resp.status_code == 200 and b'"isError":true' not in resp.content
            except httpx2.HTTPError:  # cut off: counted as failed, and the next call goes on
                ok = False
            answers.append((trio.current_time(), ok))
            await trio.sleep(PAUSE_S)


async def _sample(cluster: Cluster, start: float, samples: list[tuple[float, int]]) -> None:
    """The survivors' count of forwarded requests at every `SAMPLE_S` after trio time
    `start`, for `AFTER_S` (and once more at its end)."""
    ticks = round(AFTER_S / SAMPLE_S)
    for tick in range(1, ticks + 1):
        await trio.sleep_until(start + tick * SAMPLE_S)
        samples.append((tick * SAMPLE_S, await forwarded(cluster)))


def _windows(
    answers: list[tuple[float, bool]], samples: list[tuple[float, int]], start: float, base: int
) -> list[Window]:
    """The windows of `WINDOW_S` over `AFTER_S` from the answers (trio times) and the
    forwarded samples (seconds after `start`, counts from `base`)."""
    at = dict([(0.0, base), *samples])
    out = []
    for k in range(round(AFTER_S / WINDOW_S)):
        lo, hi = k * WINDOW_S, (k + 1) * WINDOW_S
        mine = [ok for t, ok in answers if lo <= t - start < hi]
        hops = at.get(hi, at[max(at)]) - at.get(lo, base)
        out.append(Window(lo, len(mine), hops, sum(1 for ok in mine if not ok)))
    return out


async def after_kill(cluster: Cluster) -> Failover:
    """Kill (SIGKILL) the instance holding the first home and count, for `AFTER_S`, the
    calls every home's assistant makes through HAProxy and the hops they take (module
    docstring). The instance stays down.

    Raises:
        RuntimeError: no instance holds the first home.
    """
    victim = await cluster.holder(cluster.homes[0].name)
    child = None if victim is None else cluster.instance(victim).child
    if victim is None or child is None:
        raise RuntimeError(f"no instance holds {cluster.homes[0].name}")
    moved = [h.name for h in cluster.homes if await cluster.holder(h.name) == victim]
    start = trio.current_time()
    child.signal(signal.SIGKILL)
    await child.proc.wait()
    base = await forwarded(cluster)  # the survivors' count: the victim forwards no more
    answers: list[tuple[float, bool]] = []
    samples: list[tuple[float, int]] = []
    held: list[float] = []

    async def held_again(home: str) -> None:
        await cluster.wait_holder(home, lambda h: h is not None and h != victim)
        held.append(trio.current_time() - start)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(_sample, cluster, start, samples)
        for home in cluster.homes:
            nursery.start_soon(_keep_calling, cluster, home.token, start + AFTER_S, answers)
        with trio.move_on_after(AFTER_S):
            async with trio.open_nursery() as moving:
                for name in moved:
                    moving.start_soon(held_again, name)
    hopped = [
        t
        for (t, n), (_, before) in zip(samples, [(0.0, base), *samples[:-1]], strict=True)
        if n > before
    ]
    return Failover(
        victim,
        moved,
        max(held) if len(held) == len(moved) else None,
        max(hopped) if hopped else None,
        _windows(answers, samples, start, base),
    )
