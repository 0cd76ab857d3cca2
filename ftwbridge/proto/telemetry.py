"""Live telemetry, both ends (PROTOCOL.md part F; agents.yaml `telemetry`, `telemetry_hz`).

Upstream boxes stream live readings: `sub {bucket, hz}` is answered by a `snap` on the bulk lane
(the whole picture: field ids, their names, values, sources), then one lane-0 frame per due
pulse: `tick {seq}` when nothing moved, else `delta {seq, fields, sources?, dispatchBlockedBy?}`
with only what changed. Frame flag 0x02 marks a delta cut short to fit its bucket.

`LiveMirror` is the bridge's side, sans-I/O: it takes `snap`, `delta` and `tick` bodies (as
upstream writes them: the vectors' snap says `rev` where part F says `controlRev`, and may omit
`uptimeMs` and a source's `name`) and rebuilds part B's `live` answer from them alone. It
watches `seq`: a gap, or a truncated delta, means its picture may be wrong until a resync
(`resync(live)`, one `live.get`). `fit_delta` is the box's truncation rule, shared with the stub.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from importlib.resources import files
from typing import Any, Final, TypeGuard

import yaml

from .envelope import Envelope
from .frame import DEFAULT_CONTROL_BUCKET, HEADER_BYTES
from .names import SourceState
from .registry import FROZEN_FIELDS


class TelemetryMsg(enum.StrEnum):
    """The message types of part F (agents.yaml `telemetry`; a test pins the two together)."""

    SUB = "sub"
    SNAP = "snap"
    DELTA = "delta"
    TICK = "tick"


def _agents_yaml() -> Any:
    text = (files("ftwbridge.proto") / "contract" / "agents.yaml").read_text("utf-8")
    return yaml.safe_load(text)


_AGENTS: Final = _agents_yaml()
TELEMETRY_HZ: Final[tuple[float, ...]] = tuple(float(h) for h in _AGENTS["telemetry_hz"])
"""The rates a `sub` may ask (agents.yaml `telemetry_hz`): 1 and 0.2 pulses a second."""
TELEMETRY_TYPES: Final[frozenset[str]] = frozenset(
    str(m.get("t") or m.get("push")) for m in _AGENTS["telemetry"]
)
MODE_FID: Final = next(k for k, v in FROZEN_FIELDS.items() if v == "mode")
"""The frozen field id of the running mode (registry.yaml `frozen_fields`): 1."""
VALUE_FIDS: Final = frozenset(k for k, v in FROZEN_FIELDS.items() if not v.startswith("src_"))
"""Frozen ids whose values are readings (the `src_*` ids refer to sources, and `live` has none)."""


def pulse_period_s(hz: float) -> int:
    """Seconds between due pulses: 5 at 0.2 Hz, else 1 (upstream treats any other value as 1)."""
    return 5 if hz == 0.2 else 1


def fit_delta(
    seq: int,
    uptime_ms: int | None,
    fields: dict[int, int],
    sources: dict[str, Any] | None,
    blocked: list[str] | None,
    *,
    bucket: int = DEFAULT_CONTROL_BUCKET,
) -> tuple[dict[str, Any], bool]:
    """The `delta` body that fits one lane-0 frame of `bucket` bytes, and whether it was cut.

    Part F: a delta too big for the bucket drops `sources` (and with them `dispatchBlockedBy`)
    first, then fields from the highest id down; the frame then carries flag 0x02 and what was
    dropped goes on the next pulse (the caller sends again what this body lacks).
    """
    ids = sorted(fields)
    extra: dict[str, Any] = {}
    if sources is not None:
        extra["sources"] = sources
    if blocked is not None:
        extra["dispatchBlockedBy"] = blocked
    cut = False
    while True:
        body: dict[str, Any] = {"seq": seq}
        if uptime_ms is not None:
            body["uptimeMs"] = uptime_ms
        body["fields"] = {str(i): fields[i] for i in ids}
        body |= extra
        if HEADER_BYTES + len(Envelope(TelemetryMsg.DELTA, None, body).encode()) <= bucket:
            return body, cut
        cut = True
        if extra:
            extra = {}
        elif ids:
            ids.pop()
        else:
            raise ValueError("a delta with no fields does not fit the bucket")


class Moved(enum.Enum):
    """What a frame changed in the picture: nothing, readings only, or something a person
    would want to hear about soon (a source's state, the mode, a dispatch block)."""

    NOTHING = "nothing"
    READINGS = "readings"
    NOTABLE = "notable"


class NeedsResync(Exception):
    """The mirror's picture cannot be trusted until `resync`: a `seq` gap, a truncated delta,
    or a frame before any snap. `why` is `gap`, `truncated` or `no_snap`."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


def _uint(v: object) -> TypeGuard[int]:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _int_map(v: object) -> dict[int, int]:
    """A `fields` map (text or integer field ids to integers); bad entries are ignored."""
    out: dict[int, int] = {}
    if not isinstance(v, dict):
        return out
    for k, val in v.items():
        try:
            fid = int(k)
        except (TypeError, ValueError):
            continue
        if isinstance(val, int) and not isinstance(val, bool):
            out[fid] = val
    return out


def _states(sources: dict[str, Any]) -> dict[str, object]:
    return {k: (v.get("state") if isinstance(v, dict) else None) for k, v in sources.items()}


@dataclass(slots=True)
class LiveMirror:
    """The `live` answer of part B, rebuilt from one subscription's frames (sans-I/O).

    Args:
        modes: `hello_ok.modes` of the session (the snap's mode is an index into it).

    Times: `uptime_ms` is box uptime (ms); `offset_ms` (wall minus uptime, from `hello_ok` or
    a resync's `live`) gives `nowMs` when known.
    """

    modes: tuple[str, ...] = ()
    offset_ms: int | None = None
    names: dict[int, str] = field(default_factory=dict)
    values: dict[int, int] = field(default_factory=dict)
    sources: dict[str, Any] = field(default_factory=dict)
    blocked: list[str] = field(default_factory=list)
    control_rev: int = 0
    mode: str | None = None
    uptime_ms: int | None = None
    seq: int | None = None
    """The newest pulse's `seq` (None until the first pulse after a snap or resync)."""
    complete: bool = False
    """False before a snap, and after a gap or a truncation until the next resync."""

    def snap(self, body: object) -> Moved:
        """Take a `snap` body: the whole picture again (the box sends one on `controlRev`
        changes too). `seq` keeps counting across it."""
        b = body if isinstance(body, dict) else {}
        d = b.get("dict")
        if isinstance(d, dict):
            for k, entry in d.items():
                name = entry.get("name") if isinstance(entry, dict) else None
                if isinstance(name, str):
                    try:
                        self.names[int(k)] = name
                    except ValueError:
                        continue
        self.values = _int_map(b.get("fields"))
        before = (self.mode, _states(self.sources), list(self.blocked))
        rev = b.get("controlRev", b.get("rev"))
        if _uint(rev):
            self.control_rev = rev
        self._take_extras(b, replace=True)
        self._take_uptime(b)
        self.mode = self._mode()
        self.complete = True
        after = (self.mode, _states(self.sources), list(self.blocked))
        return Moved.NOTABLE if before != after else Moved.READINGS

    def pulse(self, t: str, body: object, *, truncated: bool = False) -> Moved:
        """Take one pulse, a `tick` or a `delta` body (`truncated`: its frame had flag 0x02).

        Raises:
            NeedsResync: `seq` skipped a pulse (a frame the door dropped), the delta was cut
                short, or no snap came yet. The part of the frame that could be taken is taken.
        """
        b = body if isinstance(body, dict) else {}
        seq = b.get("seq")
        gap = self.seq is not None and _uint(seq) and seq != self.seq + 1
        if _uint(seq):
            self.seq = seq
        self._take_uptime(b)
        moved = Moved.NOTHING
        if t == TelemetryMsg.DELTA:
            moved = self._delta(b)
        if not self.complete:
            raise NeedsResync("no_snap")
        if gap:
            self.complete = False
            raise NeedsResync("gap")
        if truncated:
            self.complete = False
            raise NeedsResync("truncated")
        return moved

    def _delta(self, b: dict[str, Any]) -> Moved:
        before = (self.mode, _states(self.sources), list(self.blocked))
        changed = _int_map(b.get("fields"))
        self.values |= changed
        self._take_extras(b, replace=False)
        self.mode = self._mode()
        if before != (self.mode, _states(self.sources), list(self.blocked)):
            return Moved.NOTABLE
        return Moved.READINGS if changed else Moved.NOTHING

    def resync(self, live: object) -> Moved:
        """Take a `live` answer (one `live.get`) as the whole picture; the stream goes on from
        the next pulse (any `seq` is taken as the next)."""
        b = live if isinstance(live, dict) else {}
        before = (self.mode, _states(self.sources), list(self.blocked))
        by_name = {v: k for k, v in {**FROZEN_FIELDS, **self.names}.items()}
        f = b.get("fields")
        if isinstance(f, dict):
            self.values = {by_name[k]: v for k, v in f.items() if k in by_name and _int(v)}
        rev = b.get("controlRev")
        if _uint(rev):
            self.control_rev = rev
        self._take_extras(b, replace=True)
        mode = b.get("mode")
        self.mode = mode if isinstance(mode, str) else None
        if self.mode is not None and self.mode in self.modes:
            self.values[MODE_FID] = self.modes.index(self.mode)
        up, now = b.get("uptimeMs"), b.get("nowMs")
        if _uint(up):
            self.uptime_ms = up
            if _uint(now):
                self.offset_ms = now - up
        self.seq = None
        self.complete = True
        after = (self.mode, _states(self.sources), list(self.blocked))
        return Moved.NOTABLE if before != after else Moved.READINGS

    def view(self) -> dict[str, Any]:
        """The `live` answer of part B (agents.yaml `answers.live`) as the frames left it.

        A source's `lastOkMs` is streamed only when its state moves (part F), so the one sent
        ages while the source stays `live` or `lagging`; as long as the box still says so, the
        source was read within its state's window, and the view gives the newest pulse's
        `uptimeMs` as its `lastOkMs` (never older than the one sent). A `stale`, `down` or
        `never` source keeps the `lastOkMs` the box sent."""
        fields: dict[str, int] = {}
        for fid in sorted(self.values):
            name = self.names.get(fid) or FROZEN_FIELDS.get(fid)
            if name is not None and fid in VALUE_FIDS and fid != MODE_FID:
                fields[name] = self.values[fid]
        out: dict[str, Any] = {"uptimeMs": self.uptime_ms or 0}
        if self.offset_ms is not None and self.uptime_ms is not None:
            out["nowMs"] = self.uptime_ms + self.offset_ms
        out |= {
            "controlRev": self.control_rev,
            "mode": self.mode,
            "fields": fields,
            "sources": {k: self._fresh(v) for k, v in self.sources.items()},
            "dispatchBlockedBy": list(self.blocked),
        }
        return out

    def _fresh(self, source: Any) -> Any:
        """`source` as `view` gives it: `lastOkMs` moved up to the newest pulse while the box
        says the source is `live` or `lagging`."""
        if not isinstance(source, dict) or self.uptime_ms is None:
            return source
        if source.get("state") not in (SourceState.LIVE, SourceState.LAGGING):
            return source
        last = source.get("lastOkMs")
        if _int(last) and last >= self.uptime_ms:
            return source
        return source | {"lastOkMs": self.uptime_ms}

    def _take_extras(self, b: dict[str, Any], *, replace: bool) -> None:
        src = b.get("sources")
        if isinstance(src, dict):
            self.sources = dict(src) if replace else {**self.sources, **src}
        elif replace:
            self.sources = {}
        blocked = b.get("dispatchBlockedBy")
        if isinstance(blocked, list):
            self.blocked = [x for x in blocked if isinstance(x, str)]
        elif replace:
            self.blocked = []

    def _take_uptime(self, b: dict[str, Any]) -> None:
        up = b.get("uptimeMs")
        if _uint(up):
            self.uptime_ms = up

    def _mode(self) -> str | None:
        idx = self.values.get(MODE_FID)
        if idx is None or not 0 <= idx < len(self.modes):
            return None
        return self.modes[idx]


def _int(v: object) -> TypeGuard[int]:
    return isinstance(v, int) and not isinstance(v, bool)
