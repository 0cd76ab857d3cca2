"""The hop channel's lean answer reader (`mesh/answer.py`): the internal listener's own answers
read as h11 reads them, fed whole, byte by byte and with bytes past the body; every other
shape, and every malformed byte, refused."""

from __future__ import annotations

import h11
import pytest

from ftwbridge.mesh.answer import MAX_HEAD_BYTES, AnswerReader, Malformed, ReadAnswer, TooLarge
from ftwbridge.mesh.wire import HolderWire

from .test_wire import _cpu_s

REQUEST = b"POST /mcp HTTP/1.1\r\nhost: b2\r\ncontent-length: 2\r\n\r\n{}"


def _read(data: bytes, *, step: int = 0, max_body: int = 1 << 20) -> ReadAnswer | None:
    """`data` fed whole (`step` 0) or `step` bytes at a time; the answer, or None."""
    reader = AnswerReader(max_body)
    if not step:
        return reader.feed(data)
    got = None
    for i in range(0, len(data), step):
        assert got is None, "an answer before its last byte"
        got = reader.feed(data[i : i + step])
    return got


def _listener_answer(status: int, headers: dict[str, str], body: bytes) -> bytes:
    """The bytes the internal listener writes for this answer (`HolderWire.answer`)."""
    wire = HolderWire(now=0.0, max_body_bytes=1 << 20, body_s=10, idle_s=10, head_s=10)
    wire.receive_data(REQUEST, 0.0)
    assert wire.next_event() is not None
    return wire.answer(status, headers, body)


def _h11(data: bytes, head_bytes: int = 16 * 1024) -> tuple[int, list[tuple[str, str]], bytes]:
    conn = h11.Connection(h11.CLIENT, max_incomplete_event_size=head_bytes)
    conn.send(h11.Request(method="POST", target="/mcp", headers=[("host", "b2")]))
    conn.send(h11.EndOfMessage())
    conn.receive_data(data)
    head = conn.next_event()
    assert isinstance(head, h11.Response)
    body = b""
    while not isinstance(event := conn.next_event(), h11.EndOfMessage):
        assert isinstance(event, h11.Data)
        body += event.data
    pairs = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in head.headers]
    return head.status_code, pairs, body


ANSWERS = [
    (200, {"content-type": "application/json", "ftw-holder": "b2"}, b'{"jsonrpc":"2.0"}'),
    (421, {"ftw-mesh-moved": "1"}, b""),
    (403, {"content-type": "application/json"}, b'{"error":"x"}' * 50),
    (429, {"retry-after": "3", "x-sp": "a  b\tc"}, b"{}"),
    (204, {}, b""),
]


@pytest.mark.parametrize(("status", "headers", "body"), ANSWERS)
@pytest.mark.parametrize("step", [0, 1, 7])
def test_the_listeners_answers_read_as_h11_reads_them(
    status: int, headers: dict[str, str], body: bytes, step: int
) -> None:
    data = _listener_answer(status, headers, body)
    got = _read(data, step=step)
    assert got is not None
    assert (got.status, got.headers, got.body) == _h11(data)
    assert got.keep is (status < 400)  # the listener closes after an answer of 400 or more


def test_a_partial_answer_waits_for_more() -> None:
    data = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nab"
    assert _read(data) is None
    assert _read(b"HTTP/1.1 200 OK\r\ncontent-le") is None


@pytest.mark.parametrize(
    ("data", "keep"),
    [
        (b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}", True),
        (b"HTTP/1.1 200\r\ncontent-length: 2\r\n\r\n{}", True),  # no reason phrase
        (b"HTTP/1.1 200 OK\r\nConnection: keep-alive, Close\r\ncontent-length: 2\r\n\r\n{}", False),
        (
            b"HTTP/1.1 200 OK\r\nconnection: keep-alive,\tclose\r\ncontent-length: 2\r\n\r\n{}",
            False,
        ),
        (b"HTTP/1.0 200 OK\r\ncontent-length: 2\r\n\r\n{}", False),
        (b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}HTTP", False),  # bytes past the body
        (b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-length: 2\r\n\r\n{}", True),
    ],
)
def test_whether_the_connection_is_kept(data: bytes, keep: bool) -> None:
    got = _read(data)
    assert got is not None and got.body == b"{}" and got.keep is keep


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (b"garbage\r\n\r\n", "out of form"),
        (b"HTTP/2 200 OK\r\ncontent-length: 0\r\n\r\n", "out of form"),
        (b"HTTP/1.1 20 OK\r\ncontent-length: 0\r\n\r\n", "out of form"),
        (b"HTTP/1.1 200 OK\rX\r\ncontent-length: 0\r\n\r\n", "out of form"),
        (b"HTTP/1.1 200 OK\r\nx: a\nb: c\r\ncontent-length: 0\r\n\r\n", "out of form"),
        (b"HTTP/1.1 200 OK\r\nx: a\r\n b\r\ncontent-length: 0\r\n\r\n", "out of form"),  # folded
        (b"HTTP/1.1 200 OK\r\nx: a\0b\r\ncontent-length: 0\r\n\r\n", "out of form"),
        (b"HTTP/1.1 200 OK\r\nx y: a\r\ncontent-length: 0\r\n\r\n", "out of form"),
        (b"HTTP/1.1 200 OK\r\n: a\r\ncontent-length: 0\r\n\r\n", "out of form"),
        (b"HTTP/1.1 200 OK\r\nx : a\r\ncontent-length: 0\r\n\r\n", "out of form"),
        (b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\n", "out of form"),  # bare LF: at once
        (b"HTTP/1.1 200 OK\ncontent-length: 2\n\n{}", "out of form"),
        (b"HTTP/1.1 200 OK\r\ncontent-le", None),  # no head end yet: waits
        (b"HTTP/1.1 100 Continue\r\n\r\n", "interim"),
        (b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n", "transfer coding"),
        (b"HTTP/1.1 200 OK\r\n\r\n", "Content-Length"),
        (b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\nab", "Content-Length"),
        (b"HTTP/1.1 200 OK\r\ncontent-length: -1\r\n\r\n", "Content-Length"),
        (b"HTTP/1.1 200 OK\r\ncontent-length: 1,1\r\n\r\nab", "Content-Length"),
        (b"HTTP/1.1 200 OK\r\ncontent-length: \xb2\r\n\r\nab", "Content-Length"),
        (b"HTTP/1.1 204 No Content\r\ncontent-length: x\r\n\r\n", "Content-Length"),
        (b"HTTP/1.1 204 No Content\r\ncontent-length: -0\r\n\r\n", "Content-Length"),
        (
            b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\ncontent-length: 1\r\n\r\n",
            "Content-Length",
        ),
        (b"HTTP/1.1 204 No Content\r\ncontent-length: 5\r\n\r\nhello", "other than 0"),
        (b"HTTP/1.1 304 Not Modified\r\ncontent-length: 1,1\r\n\r\n", "Content-Length"),
    ],
)
def test_what_is_not_such_an_answer_is_refused(data: bytes, words: str | None) -> None:
    if words is None:
        assert _read(data) is None
        return
    for step in (0, 1):
        with pytest.raises(Malformed, match=words):
            _read(data, step=step)


def test_a_204_with_a_length_of_0_is_read_as_h11_reads_it() -> None:
    data = b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\n\r\n"
    got = _read(data)
    assert got is not None and (got.status, got.body, got.keep) == (204, b"", True)
    assert _h11(data)[0] == 204


def test_a_head_past_the_bound_and_a_body_past_its_bound_are_refused() -> None:
    with pytest.raises(Malformed, match="larger than"):
        _read(b"HTTP/1.1 200 OK\r\nx: " + b"y" * MAX_HEAD_BYTES)
    with pytest.raises(Malformed, match="larger than"):
        _read(b"HTTP/1.1 200 OK\r\nx: " + b"y" * MAX_HEAD_BYTES + b"\r\n\r\n")
    with pytest.raises(TooLarge, match="larger than 10 bytes"):
        _read(b"HTTP/1.1 200 OK\r\ncontent-length: 11\r\n\r\n", max_body=10)


def test_a_long_run_of_blanks_inside_a_value_costs_what_h11_pays() -> None:
    """The reading stays linear on a head of 32 KiB that is mostly one value's inner blanks
    (an expression that tried them again at each blank cost a second here)."""
    data = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nx: x" + b"\t " * 16_300 + b"y\r\n\r\n{}"

    got = _read(data)
    assert got is not None and (got.status, got.headers, got.body) == _h11(data, MAX_HEAD_BYTES)
    # generous: a quadratic reading costs thousands of times h11's here
    assert _cpu_s(lambda: _read(data)) < 10 * _cpu_s(lambda: _h11(data, MAX_HEAD_BYTES)) + 0.02


def test_a_body_in_many_small_reads_costs_what_h11_pays() -> None:
    """8 MiB in reads of one TCP segment's payload (1448 bytes): each byte taken a bounded
    number of times (copying the whole buffer per read cost seconds here)."""
    body = bytes(range(256)) * (8 * 4096)
    data = b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(body) + body
    reads = [data[i : i + 1448] for i in range(0, len(data), 1448)]

    def lean() -> ReadAnswer | None:
        reader = AnswerReader(len(body))
        got = None
        for piece in reads:
            got = reader.feed(piece)
        return got

    def by_h11() -> None:
        conn = h11.Connection(h11.CLIENT)
        conn.send(h11.Request(method="POST", target="/mcp", headers=[("host", "b2")]))
        conn.send(h11.EndOfMessage())
        for piece in reads:
            conn.receive_data(piece)
            while conn.next_event() not in (h11.NEED_DATA, h11.PAUSED):
                pass

    got = lean()
    assert got is not None and got.body == body and got.keep
    assert _cpu_s(lean) < 3 * _cpu_s(by_h11) + 0.05  # generous: it costs less than h11's
