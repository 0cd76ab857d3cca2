"""The stub box's live telemetry, as upstream streams it to phones (PROTOCOL.md part F).

Sans-I/O. `Streams.subscribe` answers an agent's `sub` (the first `snap` on its id, or a
refusal raised as `Problem`); `Streams.pulse(now_ms, uptime_ms)` returns the frames due at that
moment, one lane-0 frame per subscription whose pulse is due (each whole second of uptime at
1 Hz, each fifth at 0.2 Hz): `tick` when nothing moved since what was last sent, else a `delta`
with only what changed, cut to the bucket by `fit_delta` (flag 0x02); what a cut dropped goes
on the next pulse, because each pulse compares against what was sent, not what was seen. A
change of `controlRev` sends a fresh `snap` (no id) first. There is no unsubscribe: a stream
ends with its session. The readings are `Home.live` at the same moment as a `live.get`; they
move every second as a meter's do (`stubbox.flicker`), so nearly every pulse is a `delta`
unless the home is `still` or its clock frozen.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ftwbridge.proto.frame import DEFAULT_CONTROL_BUCKET, FLAG_TRUNCATED
from ftwbridge.proto.names import Cap, Code, Mode, Scope
from ftwbridge.proto.registry import CAPS, FROZEN_FIELDS
from ftwbridge.proto.telemetry import MODE_FID, TelemetryMsg, fit_delta, pulse_period_s

from .home import Home
from .problem import Problem

MODES: tuple[str, ...] = tuple(m.value for m in Mode)
"""`hello_ok.modes`: the modes a snap's mode field indexes (registry.yaml `modes`)."""
LIVE_SESSIONS_MAX = CAPS[Cap.LIVE_SESSIONS].ceiling
"""Subscribed agent sessions one home serves at once (agents.yaml cap `live_sessions`)."""
_FID = {v: k for k, v in FROZEN_FIELDS.items()}


@dataclass(slots=True)
class _Stream:
    sid: int
    hz: float
    next_due_s: int
    seq: int = 0
    rev: int = -1
    fields: dict[int, int] = field(default_factory=dict)
    states: dict[str, str] = field(default_factory=dict)
    blocked: list[str] = field(default_factory=list)


def readings(home: Home, now_ms: int, uptime_ms: int) -> tuple[dict[int, int], dict[str, Any]]:
    """(field id -> value, the `live` answer) at this moment: `Home.live`, keyed by the frozen
    ids of registry.yaml (the mode as its index in `MODES`, -1 when not listed)."""
    live = home.live(now_ms, uptime_ms)
    values = {_FID[k]: v for k, v in live["fields"].items() if k in _FID}
    mode = live["mode"]
    values[MODE_FID] = MODES.index(mode) if mode in MODES else -1
    return values, live


def snap_body(values: dict[int, int], live: dict[str, Any]) -> dict[str, Any]:
    """The `snap` body (agents.yaml `telemetry`): dict, fields, sources and what blocks dispatch."""
    units = {"grid_w": "W", "pv_w": "W", "battery_w": "W", "load_w": "W", "ev_w": "W"}
    units["battery_soc"] = "permille"
    dct = {
        str(fid): {"name": FROZEN_FIELDS[fid], "unit": units.get(FROZEN_FIELDS[fid]), "srcId": None}
        for fid in sorted(values)
    }
    return {
        "uptimeMs": live["uptimeMs"],
        "controlRev": live["controlRev"],
        "dict": dct,
        "fields": {str(fid): values[fid] for fid in sorted(values)},
        "sources": live["sources"],
        "dispatchBlockedBy": live["dispatchBlockedBy"],
    }


class Streams:
    """Every agent session's subscription at one box (sans-I/O).

    Args:
        home: the simulated home whose readings are streamed.
        bucket: the lane-0 bucket of agent sessions (512 bytes).
    """

    def __init__(self, home: Home, *, bucket: int = DEFAULT_CONTROL_BUCKET) -> None:
        self.home = home
        self.bucket = bucket
        self.booting_until_ms = 0
        """Box uptime (ms) before which a `sub` is refused `E_BOOTING`."""
        self._streams: dict[int, _Stream] = {}

    def __len__(self) -> int:
        return len(self._streams)

    def __contains__(self, sid: object) -> bool:
        return sid in self._streams

    def subscribe(
        self, sid: int, body: object, scopes: list[str], now_ms: int, uptime_ms: int
    ) -> dict[str, Any] | None:
        """An agent's `sub {bucket, hz}` on session `sid`: returns the first `snap` body (sent on
        the sub's id), or None for a later `sub` on the same session (it changes `hz` only and
        is answered by nothing, as upstream).

        Raises:
            Problem: `E_SCOPE_DENIED {needScope}` without `ftw.live.read`, `E_BOOTING` while the
                box starts, `E_CAP_EXCEEDED {cap: live_sessions, max, asked}` past the home's bound.
        """
        b = body if isinstance(body, dict) else {}
        hz = 0.2 if b.get("hz") == 0.2 else 1.0
        old = self._streams.get(sid)
        if old is not None:
            old.hz = hz
            period = pulse_period_s(hz)
            old.next_due_s = (uptime_ms // 1000 // period + 1) * period
            return None
        if Scope.FTW_LIVE_READ.value not in scopes:
            raise Problem(Code.E_SCOPE_DENIED, needScope=Scope.FTW_LIVE_READ.value)
        if uptime_ms < self.booting_until_ms:
            raise Problem(Code.E_BOOTING)
        if len(self._streams) >= LIVE_SESSIONS_MAX:
            asked = len(self._streams) + 1
            raise Problem(
                Code.E_CAP_EXCEEDED, cap=Cap.LIVE_SESSIONS.value, max=LIVE_SESSIONS_MAX, asked=asked
            )
        period = pulse_period_s(hz)
        s = _Stream(sid, hz, (uptime_ms // 1000 // period + 1) * period)
        self._streams[sid] = s
        return self._snap(s, now_ms, uptime_ms)

    def _snap(self, s: _Stream, now_ms: int, uptime_ms: int) -> dict[str, Any]:
        values, live = readings(self.home, now_ms, uptime_ms)
        s.rev = live["controlRev"]
        s.fields = dict(values)
        s.states = {k: v["state"] for k, v in live["sources"].items()}
        s.blocked = list(live["dispatchBlockedBy"])
        return snap_body(values, live)

    def end(self, sid: int) -> None:
        """Session `sid` ended: its stream ends with it (there is no unsubscribe)."""
        self._streams.pop(sid, None)

    def clear(self) -> None:
        """Every session ended (the uplink closed): no stream is left."""
        self._streams.clear()

    def next_due_ms(self) -> int | None:
        """Box uptime (ms) of the next due pulse, or None when nobody is subscribed."""
        return min((s.next_due_s * 1000 for s in self._streams.values()), default=None)

    def pulse(self, now_ms: int, uptime_ms: int) -> list[tuple[int, str, dict[str, Any], int]]:
        """The frames due at this moment: (sid, type, body, frame flags) in order; a `snap`
        (flags 0, bulk lane) when `controlRev` moved, then one `tick` or `delta` (lane 0)."""
        out: list[tuple[int, str, dict[str, Any], int]] = []
        now_s = uptime_ms // 1000
        due = [s for s in self._streams.values() if s.next_due_s <= now_s]
        if not due:
            return out
        values, live = readings(self.home, now_ms, uptime_ms)
        for s in due:
            period = pulse_period_s(s.hz)
            s.next_due_s = (now_s // period + 1) * period
            if live["controlRev"] != s.rev:
                out.append((s.sid, TelemetryMsg.SNAP.value, self._snap(s, now_ms, uptime_ms), 0))
            s.seq += 1
            out.append(self._frame(s, values, live, uptime_ms))
        return out

    def _frame(
        self, s: _Stream, values: dict[int, int], live: dict[str, Any], uptime_ms: int
    ) -> tuple[int, str, dict[str, Any], int]:
        changed = {k: v for k, v in values.items() if s.fields.get(k) != v}
        states = {k: v["state"] for k, v in live["sources"].items()}
        sources = live["sources"] if states != s.states else None
        blocked = live["dispatchBlockedBy"] if live["dispatchBlockedBy"] != s.blocked else None
        if not changed and sources is None and blocked is None:
            return (s.sid, TelemetryMsg.TICK.value, {"seq": s.seq, "uptimeMs": uptime_ms}, 0)
        body, cut = fit_delta(s.seq, uptime_ms, changed, sources, blocked, bucket=self.bucket)
        for k in body["fields"]:
            s.fields[int(k)] = values[int(k)]
        if "sources" in body:
            s.states = states
        if "dispatchBlockedBy" in body:
            s.blocked = list(live["dispatchBlockedBy"])
        return (s.sid, TelemetryMsg.DELTA.value, body, FLAG_TRUNCATED if cut else 0)


__all__ = ["LIVE_SESSIONS_MAX", "MODES", "Streams", "readings", "snap_body"]
