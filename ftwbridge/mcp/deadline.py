"""A call's deadline, counted from its start at the instance it entered (sans-I/O: times are
trio clock seconds passed in, never read here).

The promise (docs/operations.md, "Faults"): every `/mcp` call is answered in words within
`call_deadline_s` of its start. So every bound on the way is taken from that one start rather
than from when each step begins:

- the call's work (its box reads, a command, a forward to the instance holding the home) is
  cut at `work_ends`: the start plus `call_deadline_s`, less `answer_margin_s` to write the
  words;
- a forward carries what is left, less `HOP_S` for the answer's way back, in the header
  `BUDGET` (milliseconds, relative: no two instances' clocks are compared); the holder cuts
  its own work at its receipt plus that budget, less its answer margin, so its words reach
  the entry in time, and the entry cuts the forward at its own `work_ends` if they do not
  (a holder stopped or frozen);
- the balancer in front (`cluster/services.py`) gives an instance `call_deadline_s` from when
  it sent the request, and answers a frozen instance's call in words of its own.
"""

from __future__ import annotations

import math
import re

ANSWER_S = 0.5
"""Time kept back from a call's deadline to write its words, seconds (a tenth of the
deadline when that is shorter)."""
HOP_S = 0.5
"""Time kept back from a forward's budget for the holder's answer to come back, seconds."""
BUDGET = "ftw-budget-ms"
"""The header of a forwarded request: the milliseconds the holder has for it, counted from
its arrival. It can only shorten the holder's own `call_deadline_s`, never lengthen it. The
entry drops a client's own and adds it before signing, so the hop's signature covers it
(`mesh/signing.py`: the holder reads only covered headers)."""
BUDGET_MAX_MS = 999_999_999
"""The largest `BUDGET` sent (a call with no deadline, as in tests, sends this)."""
_DIGITS = re.compile(r"[0-9]{1,9}")


def answer_margin_s(deadline_s: float) -> float:
    """The margin kept to write a call's words: `ANSWER_S`, or a tenth of `deadline_s`
    (seconds) when that is less."""
    return min(ANSWER_S, deadline_s / 10)


def work_ends(started: float, deadline_s: float, budget_s: float | None = None) -> float:
    """When a call that started at `started` (trio time, s) must stop its work: its start
    plus `deadline_s` (or plus the forwarding instance's `budget_s`, when that is shorter),
    less `answer_margin_s`."""
    window = deadline_s if budget_s is None else min(deadline_s, budget_s)
    return started + window - answer_margin_s(deadline_s)


def hop_budget_ms(ends: float, now: float) -> int:
    """The `BUDGET` to send with a forward at `now` for a call whose work ends at `ends`
    (trio times, s): what is left less `HOP_S`, in whole ms, at least 0."""
    left = ends - now - HOP_S
    if math.isnan(left) or left <= 0:
        return 0
    return int(min(left * 1000, BUDGET_MAX_MS))


def parse_budget(values: list[str] | None) -> float | None:
    """The budget of a forwarded request from its `BUDGET` header values, seconds; None when
    it has none, or one that is not a count of ms in ASCII digits (then the holder's own
    deadline applies)."""
    if not values or len(values) != 1 or not _DIGITS.fullmatch(values[0].strip()):
        return None
    return int(values[0].strip()) / 1000
