"""Our initiator against the stub box's responder, in memory: every read and every refusal.

No sockets and no event loop: `AgentSession` (bridge side) and `Box` (box side) exchange bytes.
"""

from __future__ import annotations

from typing import Any

import pytest

from ftwbridge.proto.envelope import Envelope
from ftwbridge.proto.errors import LocalProtocolError, RemoteProtocolError
from ftwbridge.proto.names import Code, Read, Scope
from ftwbridge.proto.noise import Initiator, generate_static
from ftwbridge.proto.registry import Msg
from ftwbridge.proto.roster import AgentGrant
from ftwbridge.proto.session import AgentSession, Failed, Push, Reply, Terminated
from stubbox.box import Box
from stubbox.home import Home
from stubbox.owner import Owner

NOW = 1_790_000_000_000
READ_SCOPES = tuple(
    s.value for s in Scope if s.value.endswith(".read") and "members" not in s.value
)


class Pair:
    """A bridge-side session joined to a stub box by plain function calls."""

    def __init__(
        self,
        *,
        scopes: tuple[str, ...] = READ_SCOPES,
        ops: tuple[str, ...] = (),
        caps: dict[str, int] | None = None,
        ttl_ms: int = 3_600_000,
        clock: str = "ntp",
        delay_ms: int = 0,
        hostile: bool = False,
    ) -> None:
        self.owner = Owner("h1", seed="h1", issued_at_ms=NOW)
        self.private, self.key = generate_static()
        self.grant = AgentGrant("a1", "c1", "Assistant", scopes, ops, caps or {}, NOW, NOW + ttl_ms)
        self.owner.put_agent(self.key, self.grant, now_ms=NOW)
        self.box = Box(
            home=Home(seed=1, hostile=hostile),
            roster=self.owner.roster,
            noise_private=self.owner.noise_private,
            clock_source=clock,
            answer_delay_ms=delay_ms,
        )  # type: ignore[arg-type]
        self.now = NOW
        self.session = self.open()

    def open(self, sid: int = 1, private: bytes | None = None) -> AgentSession:
        ini = Initiator(our_static=private or self.private, their_static=self.owner.noise_public)
        m2 = self.box.handshake(sid, ini.write_message1(), self.now)
        assert m2 is not None and len(m2) == 48
        keys, _ = ini.read_message2(m2)
        return AgentSession(keys)

    def exchange(self, message: bytes, sid: int = 1) -> list[Any]:
        events: list[Any] = []
        for out in self.box.receive(sid, message, self.now, 1000):
            events += self.session.receive(out)
        return events

    def hello(self) -> list[Any]:
        return self.exchange(self.session.notify(Msg.HELLO, {"proto": {"min": 1, "max": 1}}))

    def ask(self, read: Read, body: Any = None) -> Any:
        _rid, message = self.session.request(read.value, body)
        events = self.exchange(message)
        assert len(events) == 1, events
        return events[0]


def refusal(event: Any) -> tuple[str, dict[str, Any]]:
    assert isinstance(event, Failed), event
    return event.refusal.code, event.refusal.details


def test_hello_ok_carries_the_grant() -> None:
    p = Pair(caps={"reads_per_min": 30})
    [ev] = p.hello()
    assert isinstance(ev, Push) and ev.t == Msg.HELLO_OK
    b = ev.body
    assert b["role"] == "agent" and b["scopes"] == list(READ_SCOPES) and b["ops"] == []
    assert b["grantCaps"] == {"reads_per_min": 30} and b["expiresAtMs"] == NOW + 3_600_000
    assert b["clock"]["nowMs"] == NOW and b["clock"]["source"] == "ntp"


@pytest.mark.parametrize(
    ("read", "body", "answer"),
    [
        (Read.LIVE_GET, None, "live"),
        (Read.LOADPOINTS_GET, None, "loadpoints"),
        (Read.CARS_GET, None, "cars"),
        (Read.PLAN_GET, None, "plan"),
        (Read.PRICE_GET, {"fromMs": NOW, "toMs": NOW + 86_400_000}, "price"),
        (Read.HEALTH_GET, None, "health"),
        (Read.EVENTS_GET, {"limit": 5}, "events"),
        (Read.LOGS_GET, {"lines": 5, "level": "info"}, "logs"),
        (Read.DRIVERS_GET, None, "drivers"),
        (Read.CONFIG_GET, {"section": "site"}, "config"),
        (Read.DIAG_RUN, {"check": "link"}, "diag"),
    ],
)
def test_each_read_answers_on_its_own_id(read: Read, body: Any, answer: str) -> None:
    p = Pair()
    p.hello()
    ev = p.ask(read, body)
    assert isinstance(ev, Reply) and ev.t == answer and ev.id == 1
    assert isinstance(ev.body, dict)
    assert p.box.stats.by_read == {read.value: 1}  # what bench/apps_view_cost.py reads


def test_history_arrives_as_chunks_then_end() -> None:
    p = Pair()
    body = {
        "series": ["pv_w", "load_w"],
        "res": "5m",
        "fromMs": NOW - 86_400_000,
        "toMs": NOW,
        "maxPoints": 2000,
    }
    ev = p.ask(Read.HIST_QUERY, body)
    assert isinstance(ev, Reply) and ev.t == "hist.end" and len(ev.chunks) >= 2
    assert all(c["series"] == ["pv_w", "load_w"] for c in ev.chunks)


@pytest.mark.parametrize(
    ("kwargs", "read", "body", "code", "args"),
    [
        (
            {"scopes": ("ftw.live.read",)},
            Read.PLAN_GET,
            None,
            Code.E_SCOPE_DENIED,
            {"needScope": "ftw.plan.read"},
        ),
        (
            {},
            Read.CONFIG_GET,
            {"section": "secrets"},
            Code.E_NOT_FOUND,
            {"what": "section", "id": "secrets"},
        ),
        (
            {},
            Read.DIAG_RUN,
            {"check": "driver", "src": "nope"},
            Code.E_NOT_FOUND,
            {"what": "src", "id": "nope"},
        ),
        (
            {},
            Read.EVENTS_GET,
            {"limit": 5, "before": "forged"},
            Code.E_UNKNOWN_OP,
            {"arg": "before"},
        ),
        (
            {},
            Read.EVENTS_GET,
            {"limit": 101},
            Code.E_CAP_EXCEEDED,
            {"cap": "events_limit", "max": 100, "asked": 101},
        ),
        (
            {"caps": {"history_days": 2}},
            Read.HIST_QUERY,
            {"series": ["pv_w"], "res": "1h", "fromMs": NOW - 5 * 86_400_000, "toMs": NOW},
            Code.E_CAP_EXCEEDED,
            {"cap": "history_days", "max": 2, "asked": 5},
        ),
        ({"clock": "none"}, Read.LIVE_GET, None, Code.E_UNAVAILABLE, {"subsystem": "clock"}),
    ],
)
def test_refusals(
    kwargs: dict[str, Any], read: Read, body: Any, code: Code, args: dict[str, Any]
) -> None:
    p = Pair(**kwargs)
    assert refusal(p.ask(read, body)) == (code, args)


def test_api_req_cmd_and_unknown_types() -> None:
    p = Pair()
    for t, body, want in [
        ("api.req", {"path": "/"}, (Code.E_OP_NOT_GRANTED, {"t": "api.req"})),
        ("future.thing", None, (Code.E_UNKNOWN_OP, {"t": "future.thing"})),
    ]:
        _rid, message = p.session.request(t, body)
        [ev] = p.exchange(message)
        assert refusal(ev) == want


def test_rate_limit_rolling_minute() -> None:
    p = Pair(caps={"reads_per_min": 3})
    for _ in range(3):
        assert isinstance(p.ask(Read.LIVE_GET), Reply)
    code, args = refusal(p.ask(Read.LIVE_GET))
    assert code == Code.E_RATE_LIMITED and args == {"retryAfterMs": 60_000}
    p.now += 60_000
    assert isinstance(p.ask(Read.LIVE_GET), Reply)


def test_one_request_in_flight_at_the_box() -> None:
    p = Pair(delay_ms=500)
    assert isinstance(p.ask(Read.LIVE_GET), Reply)
    code, args = refusal(p.ask(Read.LIVE_GET))
    assert (code, args) == (Code.E_RATE_LIMITED, {"retryAfterMs": 500})


def test_expiry_then_terminate() -> None:
    p = Pair(ttl_ms=10_000)
    p.now += 10_000
    _rid, message = p.session.request(Read.LIVE_GET.value)
    events = p.exchange(message)
    assert refusal(events[0]) == (Code.E_GRANT_EXPIRED, {"expiresAtMs": NOW + 10_000})
    assert events[1] == Terminated("expired")
    assert p.box.session_count == 0
    # and a new handshake is not answered at all
    ini = Initiator(our_static=p.private, their_static=p.owner.noise_public)
    assert p.box.handshake(2, ini.write_message1(), p.now) is None


def test_revocation_terminates_and_refuses_handshakes() -> None:
    p = Pair()
    p.owner.drop_agent(p.key, now_ms=NOW)
    [(sid, message)] = p.box.set_roster(p.owner.roster)
    assert sid == 1 and p.session.receive(message) == [Terminated("revoked")]
    ini = Initiator(our_static=p.private, their_static=p.owner.noise_public)
    assert p.box.handshake(2, ini.write_message1(), p.now) is None


def test_unlisted_and_phone_keys_get_no_answer() -> None:
    p = Pair()
    stranger, _ = generate_static()
    ini = Initiator(our_static=stranger, their_static=p.owner.noise_public)
    assert p.box.handshake(5, ini.write_message1(), p.now) is None
    assert p.box.handshake(6, b"\x00" * 96, p.now) is None  # garbage / all-zero keys
    assert p.box.stats.handshakes_refused == 2


def test_replay_and_tamper_are_refused() -> None:
    p = Pair()
    _rid, message = p.session.request(Read.LIVE_GET.value)
    out = p.box.receive(1, message, p.now, 1000)
    assert p.box.receive(1, message, p.now, 1000) == []  # the box drops a replayed request
    p.session.receive(out[0])
    with pytest.raises(RemoteProtocolError):
        p.session.receive(out[0])  # replayed answer
    with pytest.raises(LocalProtocolError):
        p.session.request(Read.LIVE_GET.value)  # the session is poisoned for good


def test_tampered_byte_is_refused() -> None:
    p = Pair()
    _rid, message = p.session.request(Read.LIVE_GET.value)
    out = p.box.receive(1, message, p.now, 1000)[0]
    bad = bytearray(out)
    bad[20] ^= 1
    with pytest.raises(RemoteProtocolError):
        p.session.receive(bytes(bad))
    tampered = bytearray(message)
    tampered[-1] ^= 1
    assert p.box.receive(1, bytes(tampered), p.now, 1000) == []


def test_push_without_id_answers_no_call() -> None:
    p = Pair()
    rid, _ = p.session.request(Read.LIVE_GET.value)
    box_side = p.box._sessions[1].channel
    events = p.session.receive(box_side.wrap(Envelope("box.news", None, {"req": "x"})))
    assert events == [Push("box.news", {"req": "x"})] and p.session.busy
    events = p.session.receive(box_side.wrap(Envelope("live", rid + 7, {})))
    assert events == [] and p.session.stray_answers == 1 and p.session.busy


def test_unknown_type_with_id_is_answered() -> None:
    p = Pair()
    box_side = p.box._sessions[1].channel
    assert p.session.receive(box_side.wrap(Envelope("box.future", 99, {}))) == []
    [out] = p.session.data_to_send()
    env = box_side.unwrap(out)
    assert env == Envelope(
        "error", 99, {"code": "E_UNKNOWN_OP", "retryable": False, "args": {"t": "box.future"}}
    )
