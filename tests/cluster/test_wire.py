"""The internal listener's HTTP/1.1 state (`mesh/wire.py`), sans-I/O: bytes in (whole, byte by
byte, pipelined), requests and refusals out, each bound's moment told by `wake_at` and what
its end means by `timed_out`; answers whole and streamed, and when a connection is kept."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable

import pytest

from ftwbridge.mesh.wire import (
    CLOSE,
    MAX_HEAD_BYTES,
    NEED_DATA,
    HolderWire,
    Phase,
    Refusal,
    Request,
)

BODY = b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}'
POST = (
    b"POST /mcp?x=1 HTTP/1.1\r\nhost: b1\r\ncontent-type: application/json\r\n"
    b"ftw-mesh-from: b-2\r\nftw-mesh-from: again\r\ncontent-length: %d\r\n\r\n" % len(BODY)
) + BODY


def _wire(now: float = 100.0, max_body: int = 1000) -> HolderWire:
    return HolderWire(now=now, max_body_bytes=max_body, body_s=5.0, idle_s=7.0, head_s=3.0)


def _feed(wire: HolderWire, data: bytes, now: float = 100.0) -> object:
    wire.receive_data(data, now)
    return wire.next_event()


@pytest.mark.parametrize("step", [None, 1, 7])
def test_a_request_comes_whole_however_its_bytes_are_cut(step: int | None) -> None:
    wire = _wire()
    assert wire.next_event() is NEED_DATA
    pieces = [POST] if step is None else [POST[i : i + step] for i in range(0, len(POST), step)]
    events = [_feed(wire, piece) for piece in pieces]
    *before, last = events
    assert all(e is NEED_DATA for e in before)
    assert last == Request(
        "POST",
        "/mcp",
        {
            "host": ["b1"],
            "content-type": ["application/json"],
            "ftw-mesh-from": ["b-2", "again"],
            "content-length": [str(len(BODY))],
        },
        BODY,
    )
    assert wire.phase is Phase.ANSWER and wire.wake_at() == math.inf


def test_pipelined_requests_are_answered_in_turn_and_the_connection_kept() -> None:
    wire = _wire()
    first = _feed(wire, POST + POST)
    assert isinstance(first, Request)
    out = wire.answer(200, {"content-type": "application/json"}, b"{}")
    assert out.startswith(b"HTTP/1.1 200 ") and b"content-length: 2\r\n" in out
    assert out.endswith(b"\r\n\r\n{}")
    assert wire.next_cycle(101.0)
    assert wire.phase is Phase.HEAD  # the second one's bytes were here already
    assert isinstance(wire.next_event(), Request)
    wire.answer(200, {}, b"{}")
    assert wire.next_cycle(102.0) and wire.phase is Phase.IDLE
    assert wire.wake_at() == 102.0 + 7.0  # kept alive: idle_s, no longer head_s
    assert wire.timed_out() is CLOSE and wire.phase is Phase.CLOSED


def test_each_phase_has_its_bound_and_its_end() -> None:
    wire = _wire(now=50.0)
    assert wire.phase is Phase.IDLE and wire.wake_at() == 53.0  # a new connection: head_s
    assert _feed(wire, POST[:20], now=51.0) is NEED_DATA
    assert wire.phase is Phase.HEAD and wire.wake_at() == 54.0
    assert wire.timed_out() == Refusal(408, "No whole request head in time.")
    wire = _wire(now=50.0)
    assert _feed(wire, POST[:-5], now=52.0) is NEED_DATA
    assert wire.phase is Phase.BODY and wire.wake_at() == 57.0
    slow = wire.timed_out()
    assert isinstance(slow, Refusal) and slow.status == 408 and not slow.fault
    out = wire.refuse(slow)
    assert out.startswith(b"HTTP/1.1 408 Request Timeout\r\n") and b"connection: close" in out
    body = json.loads(out.partition(b"\r\n\r\n")[2])
    assert body["error"] == {"code": -32600, "message": "Request body not received in time"}
    assert wire.phase is Phase.CLOSED


def test_a_body_past_its_bound_is_413_declared_or_chunked() -> None:
    wire = _wire(max_body=10)
    refused = _feed(wire, POST[: POST.index(b"\r\n\r\n") + 4])
    assert refused == Refusal(413, "Request body too large")
    chunked = b"POST /x HTTP/1.1\r\nhost: b\r\ntransfer-encoding: chunked\r\n\r\n"
    wire = _wire(max_body=10)
    assert _feed(wire, chunked + b"6\r\nabcdef\r\n") is NEED_DATA
    assert _feed(wire, b"6\r\nabcdef\r\n") == Refusal(413, "Request body too large")
    out = wire.refuse(Refusal(413, "Request body too large"))
    assert json.loads(out.partition(b"\r\n\r\n")[2]) == {"error": "Request body too large"}


@pytest.mark.parametrize(
    ("data", "status"),
    [
        (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(40) + b"\r\n\r\n", 400),
        (b"hello there\r\n\r\n", 400),
        (b"POST /mcp HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n", 400),
        (
            b"POST / HTTP/1.1\r\nhost: b\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
            400,
        ),
        (b"POST /mcp HTTP/1.1\r\nhost: b\r\ncontent-length: x\r\n\r\n", 400),
        (b"GET /mcp HTTP/1.1\r\nhost: b\r\nx-big: " + b"a" * MAX_HEAD_BYTES, 431),
    ],
)
def test_bytes_that_are_not_http_are_a_fault_answered_in_http(data: bytes, status: int) -> None:
    wire = _wire()
    refused = _feed(wire, data)
    assert isinstance(refused, Refusal) and refused.status == status and refused.fault
    out = wire.refuse(refused)
    assert out.startswith(b"HTTP/1.1 %d " % status)
    assert "error" in json.loads(out.partition(b"\r\n\r\n")[2])


def test_a_peer_that_leaves_is_closed_without_a_word() -> None:
    wire = _wire()
    assert _feed(wire, b"") is CLOSE
    wire = _wire()
    assert _feed(wire, POST[:30]) is NEED_DATA
    assert _feed(wire, b"") is CLOSE  # mid-head: gone, not a fault


def test_a_waiting_client_gets_its_100_continue_once() -> None:
    wire = _wire()
    head = b"POST /mcp HTTP/1.1\r\nhost: b\r\nexpect: 100-continue\r\ncontent-length: 2\r\n\r\n"
    assert _feed(wire, head) is NEED_DATA
    assert wire.data_to_send() == b"HTTP/1.1 100 \r\n\r\n"
    assert wire.data_to_send() == b""
    assert isinstance(_feed(wire, b"{}"), Request)


def test_a_streamed_answer_is_chunked_and_ends_the_connection() -> None:
    wire = _wire()
    assert isinstance(_feed(wire, POST), Request)
    head = wire.stream_head(200, {"content-type": "text/event-stream", "content-length": "9"})
    assert b"transfer-encoding: chunked" in head.lower() and b"content-length" not in head
    assert wire.stream_piece(b"") == b""
    assert wire.stream_piece(b"data: 1\n\n") == b"9\r\ndata: 1\n\n\r\n"
    assert wire.stream_end() == b"0\r\n\r\n"
    assert wire.phase is Phase.CLOSED


def test_a_close_asked_either_way_is_not_kept_and_head_gets_no_body() -> None:
    wire = _wire()
    assert isinstance(
        _feed(wire, POST.replace(b"host: b1", b"host: b1\r\nconnection: close")), Request
    )
    wire.answer(200, {}, b"{}")
    assert not wire.next_cycle(101.0) and wire.phase is Phase.CLOSED
    wire = _wire()
    assert isinstance(_feed(wire, POST), Request)
    wire.answer(413, {"connection": "close"}, b"{}")
    assert not wire.next_cycle(101.0)
    wire = _wire()
    assert isinstance(_feed(wire, b"HEAD /mcp HTTP/1.1\r\nhost: b\r\n\r\n"), Request)
    out = wire.answer(405, {"allow": "POST"}, b"{}")
    assert out.endswith(b"content-length: 2\r\n\r\n")
    wire = _wire()
    assert isinstance(_feed(wire, POST), Request)
    assert b"content-length" not in wire.answer(204, {}, b"")


def test_an_answer_of_400_or_more_closes_the_connection() -> None:
    wire = _wire()
    wire.receive_data(POST + POST, 100.0)  # a second request waits behind the first
    assert isinstance(wire.next_event(), Request)
    out = wire.answer(404, {"content-type": "application/json"}, b"{}")
    assert b"connection: close" in out.lower()
    assert not wire.next_cycle(100.0)  # the second is never read


def test_the_body_s_bound_counts_from_the_heads_end() -> None:
    wire = _wire(now=100.0)
    head = b"POST /mcp HTTP/1.1\r\nhost: b1\r\ncontent-length: 4\r\n\r\n"
    wire.receive_data(head[:10], 100.0)
    wire.receive_data(head[10:], 102.5)  # the head whole within head_s, after body_s had run
    assert wire.next_event() is NEED_DATA
    assert wire.wake_at() == pytest.approx(102.5 + 5.0)


def test_a_refused_body_gets_no_100_continue() -> None:
    wire = _wire(max_body=10)
    wire.receive_data(
        b"POST /mcp HTTP/1.1\r\nhost: b1\r\nexpect: 100-continue\r\ncontent-length: 50\r\n\r\n",
        100.0,
    )
    refusal = wire.next_event()
    assert isinstance(refusal, Refusal) and refusal.status == 413
    assert wire.data_to_send() == b""


def _by_h11(data: bytes) -> Request:
    """The request h11 alone reads from `data` (the wire's fallback, and what it was)."""
    import h11

    conn = h11.Connection(h11.SERVER)
    conn.receive_data(data)
    head = conn.next_event()
    assert isinstance(head, h11.Request)
    body = b""
    while not isinstance(event := conn.next_event(), h11.EndOfMessage):
        assert isinstance(event, h11.Data)
        body += event.data
    fields: dict[str, list[str]] = {}
    for name, value in head.headers:
        fields.setdefault(name.decode("latin-1"), []).append(value.decode("latin-1"))
    target = head.target.split(b"?", 1)[0].decode("latin-1")
    return Request(head.method.decode("ascii"), target, fields, body)


@pytest.mark.parametrize(
    "data",
    [
        POST,
        b"POST /mcp HTTP/1.1\r\nHost: b\r\nX-A:  sp \t\r\nx-a: \xe9\xff\r\nX-E:\r\n\r\n",
        b"GET /box/agent-request HTTP/1.1\r\nhost: b\r\ncontent-length: 000\r\n\r\n",
        # not the plain shape: h11 reads them, as before
        b"POST /mcp HTTP/1.0\r\nhost: b\r\ncontent-length: 2\r\n\r\n{}",
        b"POST /mcp HTTP/1.1\r\nhost: b\r\nconnection: keep-alive\r\ncontent-length: 2\r\n\r\n{}",
        b"POST /mcp HTTP/1.1\r\nhost: b\r\ncontent-length: 2, 2\r\n\r\n{}",
        b"POST /mcp HTTP/1.1\r\nhost: b\r\nx: a\x7fb\x01\r\n\r\n",  # controls h11 takes
        b"POST /mcp HTTP/1.1\r\nhost: b\r\nx: a\r\n folded\r\n\r\n",
        b"POST /mcp HTTP/1.1\nhost: b\ncontent-length: 2\n\n{}",  # bare LFs
        b"POST /mcp HTTP/1.1\r\nhost: b\r\nx-big: " + b"a" * 9000 + b"\r\n\r\n",  # long
        b"POST /mcp HTTP/1.1\r\nhost: b\ncontent-length: 2\n\r\n{}",
        b"POST /mcp HTTP/1.1\r\nhost: b\r\ntransfer-encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
    ],
)
@pytest.mark.parametrize("step", [None, 1])
def test_each_request_reads_as_h11_reads_it(data: bytes, step: int | None) -> None:
    wire = _wire()
    pieces = [data] if step is None else [data[i : i + 1] for i in range(len(data))]
    *before, last = [_feed(wire, piece) for piece in pieces]
    assert all(e is NEED_DATA for e in before)
    assert last == _by_h11(data)


@pytest.mark.parametrize(
    "data",
    [
        b"POST /mcp HTTP/1.1\r\nhost: b\r\nx y: a\r\n\r\n",
        b"POST /mcp HTTP/1.1\r\nhost: b\r\nhost: c\r\n\r\n",
        b"POST /mcp HTTP/1.1\r\nx: a\r\n\r\n",  # no Host
        b"POST /m cp HTTP/1.1\r\nhost: b\r\n\r\n",
        b"POST /mcp HTTP/1.1\r\nhost: b\r\ncontent-length: +2\r\n\r\n{}",
        b"POST /mcp HTTP/1.1\r\nhost: b\r\nx: a\nb\r\n\r\n",
        b"\r\nPOST /mcp HTTP/1.1\r\nhost: b\r\ncontent-length: 2\r\n\r\n{}",
        b"\x16\x03\x01\x02\x00",  # a TLS hello, refused at its first byte as h11 does
    ],
)
def test_what_h11_refuses_is_refused_the_same(data: bytes) -> None:
    import h11

    conn = h11.Connection(h11.SERVER)
    conn.receive_data(data)
    with pytest.raises(h11.RemoteProtocolError):
        conn.next_event()
    refused = _feed(_wire(), data)
    assert isinstance(refused, Refusal) and refused.status == 400 and refused.fault


def test_plain_and_other_requests_follow_each_other_on_one_connection() -> None:
    close = POST.replace(b"host: b1", b"host: b1\r\nconnection: close")
    wire = _wire()
    assert isinstance(_feed(wire, POST + close), Request)
    wire.answer(200, {}, b"{}")
    assert wire.next_cycle(101.0) and wire.phase is Phase.HEAD
    assert wire.next_event() == _by_h11(close)  # h11's: it asks to close
    assert b"connection: close" in wire.answer(200, {}, b"{}")
    assert not wire.next_cycle(102.0)
    wire = _wire()
    assert _feed(wire, POST[:-3]) is NEED_DATA
    assert _feed(wire, b"") is CLOSE  # mid-body: gone


def _cpu_s(read: Callable[[], object]) -> float:
    """The least CPU time of three runs of `read`, s (process time: no other process's)."""
    costs = []
    for _ in range(3):
        start = time.process_time()
        read()
        costs.append(time.process_time() - start)
    return min(costs)


def test_a_long_run_of_blanks_inside_a_value_costs_what_h11_pays() -> None:
    """A head any stranger may send: the lean reading must stay linear (an expression that
    tried a run's blanks again at each of its characters cost 500 times h11's here)."""
    import h11

    data = b"POST /mcp HTTP/1.1\r\nHost: h\r\nX: x" + b" \t" * 4050 + b"y\r\n\r\n"

    def lean() -> object:
        return _feed(_wire(), data)

    def by_h11() -> object:
        conn = h11.Connection(h11.SERVER)
        conn.receive_data(data)
        return conn.next_event()

    assert lean() == _by_h11(data)  # read by the lean path: within its 8 KiB
    assert _cpu_s(lean) < 10 * _cpu_s(by_h11) + 0.02  # generous: a quadratic one is 500 times


def test_a_head_sent_a_byte_at_a_time_costs_what_h11_pays(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each read searches only the bytes that came since the last (with the lean bound raised
    to h11's here, so that a search of the whole head again per read would show: 20 times)."""
    import h11

    from ftwbridge.mesh import wire

    monkeypatch.setattr(wire, "LEAN_HEAD_BYTES", MAX_HEAD_BYTES)
    data = b"GET /mcp HTTP/1.1\r\nHost: h\r\nX: " + b"a" * 30_000
    reads = [data[i : i + 1] for i in range(len(data))]

    def lean() -> object:
        holder = _wire()
        for piece in reads:
            event = _feed(holder, piece)
        return event

    def by_h11() -> None:
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
        for piece in reads:
            conn.receive_data(piece)
            conn.next_event()

    assert lean() is NEED_DATA
    assert _cpu_s(lean) < 2 * _cpu_s(by_h11) + 0.02  # generous: it costs less than h11's


def test_a_connect_ends_its_connection_as_h11_says() -> None:
    """h11 takes a CONNECT as a switch of protocol and the connection ends after its answer:
    the lean reading leaves it to h11, so the request after it is never read."""
    data = b"CONNECT /mcp HTTP/1.1\r\nHost: h\r\n\r\nGET /mcp HTTP/1.1\r\nHost: h\r\n\r\n"
    wire = _wire()
    first = _feed(wire, data)
    assert isinstance(first, Request) and first.method == "CONNECT"
    wire.answer(200, {}, b"ok")
    assert not wire.next_cycle(101.0) and wire.phase is Phase.CLOSED


@pytest.mark.parametrize(
    ("status", "headers"),
    [
        (200, {"x": "a\x01b"}),
        (200, {"x": "a\x7fb"}),
        (200, {"x": "\x0b"}),
        (200, {"x": "a\nb"}),
        (101, {}),
        (199, {}),
        (600, {}),
        (1000, {}),
    ],
)
def test_the_writer_refuses_what_the_entry_would_not_read(
    status: int, headers: dict[str, str]
) -> None:
    wire = _wire()
    assert isinstance(_feed(wire, POST), Request)
    with pytest.raises(ValueError):
        wire.answer(status, headers, b"{}")
    with pytest.raises(ValueError):
        wire.stream_head(status, headers)


def test_a_routes_own_framing_headers_are_never_written_in_any_case() -> None:
    wire = _wire()
    assert isinstance(_feed(wire, POST), Request)
    out = wire.answer(200, {"Content-Length": "99", "Transfer-Encoding": "x", "X-T": "a\tb"}, b"{}")
    assert out.lower().count(b"content-length") == 1 and b"transfer-encoding" not in out.lower()
    assert b"content-length: 2\r\n" in out and b"X-T: a\tb\r\n" in out
    head = wire.stream_head(200, {"content-LENGTH": "5"})
    assert b"content-LENGTH" not in head and head.count(b"transfer-encoding: chunked") == 1
