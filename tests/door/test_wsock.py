"""`door.wsock.LeanSocket` on memory streams, with trio's MockClock: its timing rules (pings,
the silence rule, the wait for a Close in reply) and its limits (RFC 6455 sections 5 and 7)."""

from __future__ import annotations

import pytest
import trio
import trio.testing
from wsproto.connection import Connection, ConnectionType
from wsproto.events import BytesMessage, CloseConnection, Event, Message, Ping, Pong, TextMessage

from ftwbridge.door.wsock import BoxGone, LeanSocket
from ftwbridge.edgerules import CLOSE_REPLY_S, LAST_WORDS_S

SILENCE_S = 45.0
PING_S = 15.0


class Box:
    """The box's end: wsproto's client `Connection` over the other memory stream."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.conn = Connection(ConnectionType.CLIENT)

    async def send(self, event: Event) -> None:
        await self.stream.send_all(self.conn.send(event))

    async def events(self) -> list[Event]:
        """What the door has sent so far (waits for at least one read); [] once it closed."""
        data = await self.stream.receive_some(65536)
        if not data:
            return []
        self.conn.receive_data(data)
        return list(self.conn.events())


def pair(max_message: int = 65536) -> tuple[LeanSocket, Box]:
    ours, theirs = trio.testing.memory_stream_pair()
    ws = LeanSocket(
        ours,
        Connection(ConnectionType.SERVER),
        "192.0.2.1",
        silence_s=SILENCE_S,
        max_message=max_message,
    )
    return ws, Box(theirs)


async def test_messages_either_way_text_and_fragments(autojump_clock: trio.abc.Clock) -> None:
    ws, box = pair()
    await box.send(Message(data=b"ab", message_finished=False))
    await box.send(Message(data=b"cd"))
    await box.send(TextMessage(data="hi"))
    assert await ws.receive() == b"abcd"
    assert await ws.receive() == "hi"
    await ws.send(b"\x01\x02")
    [event] = await box.events()
    assert isinstance(event, BytesMessage) and event.data == b"\x01\x02"


async def test_sends_go_out_whole_in_call_order_and_a_cancelled_waiter_sends_nothing(
    autojump_clock: trio.abc.Clock,
) -> None:
    """The rule the door's uplink relies on (it takes no lock of its own): four sends at once
    while the box reads nothing yet; the first, cancelled mid-write, still goes out whole, the
    third, cancelled while it waits for the lock, never goes, and the rest keep call order."""
    ours, theirs = trio.testing.lockstep_stream_pair()  # a write waits for the box's read
    ws = LeanSocket(
        ours, Connection(ConnectionType.SERVER), "192.0.2.1", silence_s=SILENCE_S, max_message=64
    )
    box = Box(theirs)
    scopes = [trio.CancelScope() for _ in range(4)]

    async def send(i: int) -> None:
        with scopes[i]:
            await ws.send(bytes([i]) * 3000)

    async with trio.open_nursery() as nursery:
        for i in range(4):
            nursery.start_soon(send, i)
            await trio.testing.wait_all_tasks_blocked()
        assert ws._lock.statistics().tasks_waiting == 3  # the first is writing
        scopes[0].cancel()
        scopes[2].cancel()
        got: list[bytes] = []
        while len(got) < 3:
            got += [e.data for e in await box.events() if isinstance(e, BytesMessage)]
    assert got == [b"\x00" * 3000, b"\x01" * 3000, b"\x03" * 3000]
    assert [s.cancelled_caught for s in scopes] == [False, False, True, False]


async def test_pings_then_silence_closes(autojump_clock: trio.abc.Clock) -> None:
    """A Ping every `ping_s`; a box that answers none is let go `silence_s` after its last bytes."""
    ws, box = pair()
    started = trio.current_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(ws.watch, PING_S)
        with pytest.raises(BoxGone):
            await ws.receive()
        nursery.cancel_scope.cancel()
    took = trio.current_time() - started
    assert SILENCE_S <= took < SILENCE_S + 1, took
    events = []
    while more := await box.events():
        events += more
    assert [type(e) for e in events] == [Ping, Ping]  # at 15 s and 30 s; at 45 s it closed


async def test_a_box_that_answers_pings_is_not_silent(autojump_clock: trio.abc.Clock) -> None:
    ws, box = pair()

    async def answer_pings() -> None:
        while events := await box.events():
            for event in events:
                if isinstance(event, Ping):
                    await box.send(event.response())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ws.watch, PING_S)
        nursery.start_soon(answer_pings)
        with trio.move_on_after(SILENCE_S * 4) as scope:
            await ws.receive()  # no message comes; pongs keep it open
        assert scope.cancelled_caught
        nursery.cancel_scope.cancel()


async def test_our_close_waits_for_the_reply_then_lets_go(autojump_clock: trio.abc.Clock) -> None:
    """A Close from another task while the reader waits: the box sends none back, so the
    stream closes `CLOSE_REPLY_S` later (RFC 6455 section 7.1.1)."""
    ws, box = pair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(ws.watch, PING_S)

        async def reader() -> None:
            with pytest.raises(BoxGone):
                await ws.receive()
            await ws.drain()

        nursery.start_soon(reader)
        await trio.sleep(1)
        started = trio.current_time()
        await ws.close(4409, "superseded")
        [event] = await box.events()
        assert isinstance(event, CloseConnection) and event.code == 4409
        while await box.stream.receive_some(65536):
            pass  # the door closes the stream
        assert trio.current_time() - started == pytest.approx(CLOSE_REPLY_S, abs=0.1)
        nursery.cancel_scope.cancel()


async def test_the_boxs_close_is_answered(autojump_clock: trio.abc.Clock) -> None:
    ws, box = pair()
    await box.send(CloseConnection(code=1000))
    with pytest.raises(BoxGone):
        await ws.receive()
    [event] = await box.events()
    assert isinstance(event, CloseConnection) and event.code == 1000


@pytest.mark.parametrize(
    ("raw", "code"),
    [
        (b"\x82\x01a", 1002),  # unmasked: a client must mask (section 5.1)
        (b"\x89\xfe\x00\x80" + bytes(4) + bytes(128), 1002),  # a ping over 125 bytes
        (b"\x81\x82\x00\x00\x00\x00\xff\xfe", 1007),  # text that is not UTF-8
    ],
)
async def test_a_broken_frame_fails_the_socket(
    autojump_clock: trio.abc.Clock, raw: bytes, code: int
) -> None:
    ws, box = pair()
    await box.stream.send_all(raw)
    with pytest.raises(BoxGone):
        await ws.receive()
    assert ws.fault is not None and str(code) in ws.fault
    [event] = await box.events()
    assert isinstance(event, CloseConnection) and event.code == code


async def test_a_message_over_the_limit_is_refused_as_it_grows(
    autojump_clock: trio.abc.Clock,
) -> None:
    """Refused past `max_message` while it still comes (1009): never buffered whole."""
    ws, box = pair(max_message=1000)
    await box.send(Message(data=b"a" * 600, message_finished=False))
    await box.send(Message(data=b"a" * 600, message_finished=False))
    with pytest.raises(BoxGone):
        await ws.receive()
    [event] = await box.events()
    assert isinstance(event, CloseConnection) and event.code == 1009
    with pytest.raises(BoxGone):
        await ws.send(b"x")  # closed: no more messages either way


async def test_a_failed_socket_drops_what_still_comes_then_lets_go(
    autojump_clock: trio.abc.Clock,
) -> None:
    """After a Close that fails the connection (1009 here), what the box still sends is read
    and dropped for `LAST_WORDS_S`, then the stream closes: our Close is not lost to a reset."""
    ws, box = pair(max_message=1000)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(ws.watch, PING_S)
        await box.send(Message(data=b"a" * 1200, message_finished=False))
        with pytest.raises(BoxGone):
            await ws.receive()
        started = trio.current_time()
        await box.send(Message(data=b"b" * 500, message_finished=False))  # still coming
        await ws.drain()
        assert trio.current_time() - started == pytest.approx(LAST_WORDS_S, abs=0.1)
        nursery.cancel_scope.cancel()


async def test_empty_fragments_keep_nothing(autojump_clock: trio.abc.Clock) -> None:
    """A message of endless empty fragments (6 bytes a frame on the wire) never reaches
    `max_message`; each was kept as a part, so a box (or a stranger until its hello is due)
    grew the bridge's memory by a list slot per 6 bytes it sent. Empty parts are not kept."""
    ws, box = pair()
    got: list[str | bytes] = []
    async with trio.open_nursery() as nursery:

        async def reader() -> None:
            got.append(await ws.receive())

        nursery.start_soon(reader)
        for _ in range(20):
            await box.stream.send_all(
                b"".join(
                    box.conn.send(Message(data=b"", message_finished=False)) for _ in range(5000)
                )
            )
        await trio.testing.wait_all_tasks_blocked()
        assert len(ws._parts) <= 1  # 100,000 fragments read, none kept
        await box.send(Message(data=b"end"))
    assert got == [b"end"]


def _frame(
    first: int, payload: bytes, *, mask: bytes = b"\x01\x02\x03\x04", wide: int = 0
) -> bytes:
    """One client frame by hand: `first` byte, the payload masked with `mask`, its length in
    7 bits, or in `wide` (2 or 8) bytes when asked or needed."""
    n = len(payload)
    if not wide:
        wide = 0 if n < 126 else (2 if n < 65536 else 8)
    if wide:
        head = bytes([first, 0x80 | (126 if wide == 2 else 127)]) + n.to_bytes(wide, "big")
    else:
        head = bytes([first, 0x80 | n])
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


async def test_whole_binary_frames_cut_anywhere_by_the_reads(
    autojump_clock: trio.abc.Clock,
) -> None:
    """Frames taken whole by the door's own parser arrive the same however the bytes are cut:
    7-bit and 16-bit lengths, an empty one, a Ping between."""
    ws, box = pair()
    payloads = [b"", b"x" * 125, bytes(range(256)) * 4, b"tail", b"seven b", b"\xff"]
    raw = b"".join(_frame(0x82, p) for p in payloads[:2])
    raw += _frame(0x89, b"hi") + b"".join(_frame(0x82, p) for p in payloads[2:])
    for i in range(0, len(raw), 7):
        await box.stream.send_all(raw[i : i + 7])
    for p in payloads:
        assert await ws.receive() == p
    [pong] = await box.events()
    assert pong == Pong(payload=b"hi")


async def test_bytes_after_the_request_head_are_frames_too(
    autojump_clock: trio.abc.Clock,
) -> None:
    ours, theirs = trio.testing.memory_stream_pair()
    whole, rest = _frame(0x82, b"first"), _frame(0x82, b"second")
    ws = LeanSocket(
        ours,
        Connection(ConnectionType.SERVER),
        "192.0.2.1",
        silence_s=SILENCE_S,
        max_message=65536,
        initial=whole + rest[:3],
    )
    await theirs.send_all(rest[3:])
    assert await ws.receive() == b"first"
    assert await ws.receive() == b"second"


@pytest.mark.parametrize(
    "raw",
    [
        _frame(0x82, b"ab", wide=2),  # a length in more bytes than it needs (section 5.2)
        _frame(0x02, b"ab") + _frame(0x82, b"cd"),  # a new message inside a fragmented one
        _frame(0xC2, b"ab"),  # RSV1 without an extension
        _frame(0x8B, b"ab"),  # a reserved opcode
    ],
)
async def test_frames_the_door_does_not_take_itself_are_judged_by_wsproto(
    autojump_clock: trio.abc.Clock, raw: bytes
) -> None:
    ws, box = pair()
    await box.stream.send_all(raw)
    with pytest.raises(BoxGone):
        await ws.receive()
    assert ws.fault is not None and "1002" in ws.fault
    [event] = await box.events()
    assert isinstance(event, CloseConnection) and event.code == 1002


async def test_a_frame_whose_head_is_over_the_limit_is_not_held(
    autojump_clock: trio.abc.Clock,
) -> None:
    """A head that says more than `max_message`: refused (1009) from its first bytes, before
    the rest comes."""
    ws, box = pair(max_message=1000)
    await box.stream.send_all(_frame(0x82, b"a" * 70000)[:1200])
    with pytest.raises(BoxGone):
        await ws.receive()
    [event] = await box.events()
    assert isinstance(event, CloseConnection) and event.code == 1009


async def test_the_boxs_close_ends_the_frames_in_the_same_read(
    autojump_clock: trio.abc.Clock,
) -> None:
    ws, box = pair()
    close = _frame(0x88, (1000).to_bytes(2, "big"))
    await box.stream.send_all(_frame(0x82, b"one") + close + _frame(0x82, b"late"))
    assert await ws.receive() == b"one"
    with pytest.raises(BoxGone):
        await ws.receive()
    [event] = await box.events()
    assert isinstance(event, CloseConnection) and event.code == 1000
