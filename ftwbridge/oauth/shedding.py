"""Which open consent request a full bridge lets go (sans-I/O): the heaviest source's oldest.

The bound on consent requests open at once (`MAX_PENDING`) is counted for everyone, so a few
addresses could otherwise hold it full and keep every owner's sign-in out (docs/auth.md,
"Limits that strangers cannot fill"). When it is full, a new request is never refused
because of other sources: the source holding the most open requests loses its oldest one,
unless the asker itself holds at least as many as any other source, in which case its own
ask is the one refused.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Open:
    """One open consent request as the shedding sees it: its id, the source (client address
    key, `limits.client_address`) that opened it, and its expiry (ms since the epoch; the
    earliest expiry is the oldest request, as every request lives `REQUEST_TTL_MS`)."""

    id: str
    source: str
    expires_at_ms: int


def to_shed(open_now: Iterable[Open], asker: str) -> Open | None:
    """The request to end so that `asker`'s new one fits, or None when the asker holds at
    least as many open requests as the heaviest other source (its own ask is refused then).

    Ties between equally heavy sources go to the one whose oldest request is oldest.
    """
    counts: dict[str, int] = {}
    oldest: dict[str, Open] = {}
    for each in open_now:
        counts[each.source] = counts.get(each.source, 0) + 1
        held = oldest.get(each.source)
        if held is None or each.expires_at_ms < held.expires_at_ms:
            oldest[each.source] = each
    mine = counts.get(asker, 0)
    others = [s for s in counts if s != asker]
    if not others:
        return None
    heaviest = max(others, key=lambda s: (counts[s], -oldest[s].expires_at_ms))
    if counts[heaviest] <= mine:
        return None
    return oldest[heaviest]
