"""The stub box's live telemetry against the bridge's session and mirror, in memory
(PROTOCOL.md part F): `sub` answered by its first `snap`, one lane-0 frame per due pulse,
ticks and deltas, the truncation rule, a fresh `snap` on `controlRev`, refusals, and the
upstream vectors decoded by the bridge's code."""

from __future__ import annotations

from typing import Any

import pytest

from ftwbridge.proto.envelope import decode_envelope
from ftwbridge.proto.frame import FLAG_TRUNCATED, LANE_BULK, LANE_CONTROL, decode_frame
from ftwbridge.proto.names import Read, Scope
from ftwbridge.proto.noise import Initiator, Transport
from ftwbridge.proto.registry import Msg
from ftwbridge.proto.session import AgentSession, Push, Reply, Terminated
from ftwbridge.proto.telemetry import (
    TELEMETRY_HZ,
    TELEMETRY_TYPES,
    LiveMirror,
    Moved,
    NeedsResync,
    TelemetryMsg,
    fit_delta,
)
from stubbox.telemetry import LIVE_SESSIONS_MAX, MODES
from tests.stubbox.test_box_pair import NOW, Pair


def _subscribed(p: Pair, hz: float = 1, uptime_ms: int = 1000) -> tuple[LiveMirror, Push]:
    [hello] = p.hello()
    assert isinstance(hello, Push)
    _sid, message = p.session.subscribe({"bucket": 512, "hz": hz})
    assert p.session.busy is False  # a sub never holds the request in flight
    events: list[Any] = []
    for out in p.box.receive(1, message, p.now, uptime_ms):
        events += p.session.receive(out)
    [snap] = events
    assert isinstance(snap, Push) and snap.answers_sub and snap.t == TelemetryMsg.SNAP
    mirror = LiveMirror(modes=p.session.modes)
    mirror.snap(snap.body)
    return mirror, snap


def _pulse(p: Pair, uptime_ms: int) -> list[Push]:
    out: list[Push] = []
    for _sid, message in p.box.pulse(p.now, uptime_ms):
        out += [e for e in p.session.receive(message) if isinstance(e, Push)]
    return out


def test_the_contract_names_match_the_yaml() -> None:
    assert {m.value for m in TelemetryMsg} == TELEMETRY_TYPES
    assert TELEMETRY_HZ == (1.0, 0.2)


def test_sub_is_answered_by_its_snap_and_the_mirror_equals_live_get() -> None:
    p = Pair()
    p.box.frozen_ms = NOW
    mirror, _snap = _subscribed(p)
    live = p.ask(Read.LIVE_GET)  # a read goes on beside the stream, on the same session
    assert isinstance(live, Reply)
    view = mirror.view()
    for key in ("controlRev", "mode", "fields", "dispatchBlockedBy"):
        assert view[key] == live.body[key], key
    assert mirror.sources == live.body["sources"]  # as sent; the view freshens live ones
    for sid, src in view["sources"].items():
        sent = live.body["sources"][sid]
        assert {k: v for k, v in src.items() if k != "lastOkMs"} == {
            k: v for k, v in sent.items() if k != "lastOkMs"
        }
        assert src["lastOkMs"] >= sent["lastOkMs"], sid
    assert mirror.mode in MODES


def test_one_lane0_frame_per_due_pulse_tick_when_nothing_moved() -> None:
    p = Pair()
    p.box.frozen_ms = NOW  # nothing moves
    mirror, _ = _subscribed(p, uptime_ms=1500)
    assert p.box.pulse(p.now, 1900) == []  # not due before the next whole second
    seqs = []
    for second in (2, 3, 4):
        frames = p.box.pulse(p.now, second * 1000)
        assert len(frames) == 1
        [(_sid, message)] = frames
        [ev] = p.session.receive(message)
        assert isinstance(ev, Push) and ev.t == TelemetryMsg.TICK
        seqs.append(ev.body["seq"])
        assert mirror.pulse(ev.t, ev.body) is Moved.NOTHING
    assert seqs == [1, 2, 3]


def test_frames_are_lane0_of_one_bucket_and_snaps_bulk() -> None:
    p = Pair()
    ini = Initiator(our_static=p.private, their_static=p.owner.noise_public)
    m2 = p.box.handshake(2, ini.write_message1(), p.now)
    assert m2 is not None
    keys, _ = ini.read_message2(m2)
    raw, session = Transport(keys), AgentSession(keys)  # the same keys, read twice over
    p.box.receive(2, session.notify(Msg.HELLO, {}), p.now, 1000)
    [answer] = p.box.receive(2, session.subscribe({"bucket": 512, "hz": 1})[1], p.now, 1000)
    [(_sid, pulse)] = p.box.pulse(p.now, 2000)
    snap, plain = decode_frame(raw.open(answer)), raw.open(pulse)
    assert snap.lane == LANE_BULK and decode_envelope(snap.payload).t == TelemetryMsg.SNAP
    frame = decode_frame(plain)
    assert frame.lane == LANE_CONTROL and len(plain) == 512  # lane 0's one bucket
    env = decode_envelope(frame.payload)
    assert env.t in (TelemetryMsg.TICK, TelemetryMsg.DELTA) and env.id is None


def test_slow_rate_pulses_every_fifth_second() -> None:
    p = Pair()
    _subscribed(p, hz=0.2, uptime_ms=1000)
    due = [s for s in range(2, 16) if p.box.pulse(p.now, s * 1000)]
    assert due == [5, 10, 15]


def test_delta_carries_only_what_changed() -> None:
    p = Pair()
    p.box.frozen_ms = NOW
    mirror, _ = _subscribed(p)
    p.box.frozen_ms = NOW + 3 * 3600_000  # hours later: readings moved
    [ev] = _pulse(p, 2000)
    assert ev.t == TelemetryMsg.DELTA
    assert set(ev.body["fields"]) and "seq" in ev.body
    mirror.pulse(ev.t, ev.body)
    live = p.ask(Read.LIVE_GET)
    assert mirror.view()["fields"] == live.body["fields"]
    [again] = _pulse(p, 3000)
    assert again.t == TelemetryMsg.TICK  # what was sent is not sent twice


def test_controlrev_change_sends_a_fresh_snap_without_id() -> None:
    p = Pair()
    p.box.frozen_ms = NOW
    mirror, _ = _subscribed(p)
    p.box.home.controls.set_mode(MODES[-1])
    events = _pulse(p, 2000)
    assert events[0].t == TelemetryMsg.SNAP
    assert not events[0].answers_sub
    assert mirror.snap(events[0].body) is Moved.NOTABLE
    assert mirror.mode == MODES[-1]


def test_a_later_sub_changes_hz_only_and_is_answered_by_nothing() -> None:
    p = Pair()
    _subscribed(p)
    _sid, message = p.session.subscribe({"bucket": 512, "hz": 0.2})
    assert p.box.receive(1, message, p.now, 1000) == []
    assert [s for s in range(2, 7) if p.box.pulse(p.now, s * 1000)] == [5]


def test_refusals_scope_booting_and_the_cap() -> None:
    p = Pair(scopes=(Scope.FTW_PLAN_READ.value,))
    p.hello()
    _sid, message = p.session.subscribe({"bucket": 512, "hz": 1})
    [ev] = [e for out in p.box.receive(1, message, p.now, 1000) for e in p.session.receive(out)]
    assert isinstance(ev, Push) and ev.answers_sub and ev.t == Msg.ERROR
    assert ev.body["code"] == "E_SCOPE_DENIED"
    assert ev.body["args"] == {"needScope": Scope.FTW_LIVE_READ.value}

    p = Pair()
    p.box.streams.booting_until_ms = 60_000
    p.hello()
    _sid, message = p.session.subscribe({"bucket": 512, "hz": 1})
    [out] = p.box.receive(1, message, p.now, 1000)
    [ev] = p.session.receive(out)
    assert ev.body["code"] == "E_BOOTING"

    p = Pair()
    for sid in range(2, 2 + LIVE_SESSIONS_MAX):
        s = p.open(sid)
        p.box.receive(sid, s.notify(Msg.HELLO, {}), p.now, 1000)
        p.box.receive(sid, s.subscribe({"bucket": 512, "hz": 1})[1], p.now, 1000)
    assert len(p.box.streams) == LIVE_SESSIONS_MAX
    p.hello()
    _sid, message = p.session.subscribe({"bucket": 512, "hz": 1})
    [out] = p.box.receive(1, message, p.now, 1000)
    [ev] = p.session.receive(out)
    assert ev.body["code"] == "E_CAP_EXCEEDED"
    assert ev.body["args"] == {"cap": "live_sessions", "max": 4, "asked": 5}


def test_the_stream_ends_with_its_session() -> None:
    p = Pair()
    _subscribed(p)
    p.box.end(1)
    assert len(p.box.streams) == 0 and p.box.pulse(p.now, 5000) == []


def test_a_grant_that_runs_out_ends_the_stream_with_its_session() -> None:
    p = Pair(ttl_ms=10_000)
    _subscribed(p)
    assert p.box.pulse(NOW + 2_000, 2000)  # still granted: a frame
    [(_sid, message)] = p.box.pulse(NOW + 10_000, 3000)
    [ev] = p.session.receive(message)
    assert isinstance(ev, Terminated) and ev.reason == "expired"
    assert len(p.box.streams) == 0 and p.box.pulse(NOW + 11_000, 4000) == []


def test_truncation_drops_sources_then_the_highest_fields() -> None:
    sources = {f"src{i}": {"kind": "meter", "name": "x" * 40, "state": "live"} for i in range(8)}
    fields = {i: 100_000 + i for i in range(1, 11)}
    body, cut = fit_delta(7, 1000, fields, sources, ["grid"], bucket=512)
    assert cut and "sources" not in body and "dispatchBlockedBy" not in body
    assert body["fields"] == {str(i): 100_000 + i for i in range(1, 11)}
    many = {i: -(2**40) - i for i in range(1, 60)}
    body, cut = fit_delta(7, 1000, many, None, None, bucket=256)
    kept = [int(k) for k in body["fields"]]
    assert cut and kept == list(range(1, len(kept) + 1)) and len(kept) < 59
    body, cut = fit_delta(7, 1000, {2: 5}, None, None)
    assert not cut


def test_truncated_delta_goes_on_next_pulse_and_mirror_asks_for_a_resync() -> None:
    p = Pair(hostile=True)
    p.box.frozen_ms = NOW
    mirror, _ = _subscribed(p)
    p.box.streams.bucket = 64  # room for a few fields only
    p.box.frozen_ms = NOW + 3 * 3600_000
    frames = p.box.pulse(p.now, 2000)
    [(_sid, message)] = frames
    [ev] = p.session.receive(message)
    assert ev.truncated
    with pytest.raises(NeedsResync) as exc:
        mirror.pulse(ev.t, ev.body, truncated=True)
    assert exc.value.why == "truncated"
    sent = set(ev.body["fields"])
    [nxt] = _pulse(p, 3000)
    assert nxt.t == TelemetryMsg.DELTA and set(nxt.body["fields"]).isdisjoint(sent)
    live = p.ask(Read.LIVE_GET)
    mirror.resync(live.body)
    assert mirror.complete and mirror.view()["fields"] == live.body["fields"]


def test_a_seq_gap_asks_for_a_resync() -> None:
    m = LiveMirror()
    m.snap({"controlRev": 1, "fields": {"2": 5}})
    m.pulse("tick", {"seq": 1})
    with pytest.raises(NeedsResync) as exc:
        m.pulse("tick", {"seq": 3})
    assert exc.value.why == "gap"
    with pytest.raises(NeedsResync):
        LiveMirror().pulse("tick", {"seq": 1})


def _vector(vectors: dict[str, Any], name: str) -> tuple[int, int, Any]:
    [vec] = [f for f in vectors["frames"] if f["name"] == name]
    frame = decode_frame(bytes.fromhex(vec["bytes"]))
    return frame.lane, frame.flags, decode_envelope(frame.payload)


def test_upstream_vectors_decode_as_upstream_means_them(webapp_vectors: dict[str, Any]) -> None:
    lane, flags, snap = _vector(webapp_vectors, "snap_bulk")
    assert lane == LANE_BULK and snap.t == TelemetryMsg.SNAP and snap.id == 3
    m = LiveMirror()
    m.snap(snap.b)
    assert m.control_rev == 12  # upstream writes `rev`
    assert m.view()["fields"] == {"grid_w": -4200, "battery_soc": 875}
    assert m.view()["sources"]["meter.p1"]["state"] == "live"
    lane, flags, tick = _vector(webapp_vectors, "tick")
    assert (lane, flags, tick.t) == (LANE_CONTROL, 0, TelemetryMsg.TICK)
    m.seq = 40
    assert m.pulse(tick.t, tick.b) is Moved.NOTHING and m.seq == 41
    lane, flags, delta = _vector(webapp_vectors, "delta_export")
    assert (lane, flags) == (LANE_CONTROL, 0)
    assert m.pulse(delta.t, delta.b) is Moved.READINGS
    fields = m.view()["fields"]
    assert fields == {
        "grid_w": -4200,
        "pv_w": 6200,
        "battery_w": -1500,
        "battery_soc": 875,
        "load_w": 13400,
    }
    lane, flags, cut = _vector(webapp_vectors, "delta_truncated")
    assert lane == LANE_CONTROL and flags & FLAG_TRUNCATED
    with pytest.raises(NeedsResync):
        m.pulse(cut.t, cut.b, truncated=bool(flags & FLAG_TRUNCATED))
    assert m.values[2] == 11400 and m.seq == 43  # what it carried is taken


def test_a_live_source_in_the_rebuilt_view_is_as_fresh_as_the_newest_pulse() -> None:
    """A source's `lastOkMs` goes on the stream only when its state moves: while the box says
    `live` or `lagging`, the view gives the newest pulse's uptime, so a reader that ages it
    (the home view) never calls a live source stale; other states keep what the box sent."""
    p = Pair()
    p.box.frozen_ms = NOW  # nothing moves: only ticks
    mirror, _ = _subscribed(p, uptime_ms=1000)
    for second in range(2, 62):  # a minute of ticks
        for ev in _pulse(p, second * 1000):
            mirror.pulse(ev.t, ev.body)
    view = mirror.view()
    assert view["uptimeMs"] == 61_000
    sent = mirror.sources
    for sid, src in view["sources"].items():
        if sent[sid]["state"] in ("live", "lagging"):
            assert src["lastOkMs"] == 61_000, sid
        else:
            assert src == sent[sid], sid
    assert any(s["state"] == "live" for s in sent.values())
