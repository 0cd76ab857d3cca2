"""`door.wsock.LeanSocket` cutting frames itself: a head that breaks RFC 6455 (section 5.2)
is judged as soon as it has come, not once its payload has, and a valid stream reads the
same however the reads cut it. MockClock throughout."""

from __future__ import annotations

import pytest
import trio
import trio.testing
from wsproto.connection import Connection, ConnectionType
from wsproto.events import CloseConnection, Pong

from ftwbridge.door.wsock import CHECKPOINT_FRAMES, BoxGone, LeanSocket

from .test_wsock import PING_S, SILENCE_S, _frame, pair

KEY = b"\x01\x02\x03\x04"
HEADS = {
    "a ping declaring 200 bytes": b"\x89\xfe\x00\xc8" + KEY,
    "reserved opcode 0x3": b"\x83\xfe\xea\x60" + KEY,
    "RSV1 without an extension": b"\xc2\xfe\xea\x60" + KEY,
    "an unmasked frame": b"\x82\x7e\xea\x60",
    "a 16-bit length for 5 bytes": b"\x82\xfe\x00\x05" + KEY + b"abc",
}


@pytest.mark.parametrize("cut", [None, 4, 2], ids=["whole head", "no key yet", "two bytes"])
@pytest.mark.parametrize("head", list(HEADS.values()), ids=list(HEADS))
async def test_a_head_that_breaks_the_rules_is_closed_at_once(
    autojump_clock: trio.abc.Clock, head: bytes, cut: int | None
) -> None:
    """None of the payload the head declares follows; Close 1002 still goes out at once (not
    Pings, then a bare TCP close after `SILENCE_S`), also before the head's masking key has
    come, and from its first two bytes when they show the fault already (wsproto, as before
    the door cut frames, reads RSV bits and the mask bit only once the length has come)."""
    if cut == 2 and head[0] not in (0x89, 0x83):
        pytest.skip("wsproto judges this rule once the extended length has come")
    ws, box = pair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(ws.watch, PING_S)
        started = trio.current_time()
        await box.stream.send_all(head[:cut])
        with pytest.raises(BoxGone):
            await ws.receive()
        assert trio.current_time() == started  # not a timer's doing
        assert ws.fault is not None and ws.fault.startswith("Close 1002")
        [event] = await box.events()
        assert isinstance(event, CloseConnection) and event.code == 1002
        nursery.cancel_scope.cancel()


def _mixed() -> tuple[bytes, list[str | bytes], int]:
    """A valid stream of every kind of frame a box may send: (its bytes, the messages it
    carries, how many Pings are in it)."""
    euro = "€".encode()
    frames = [
        (_frame(0x82, b""), b""),
        (_frame(0x82, b"a" * 125), b"a" * 125),
        (_frame(0x82, bytes(range(256))), bytes(range(256))),
        (_frame(0x89, b"ping"), None),
        (_frame(0x01, euro[:1]) + _frame(0x8A, b"") + _frame(0x00, euro[1:2]), None),
        (_frame(0x89, b"") + _frame(0x80, euro[2:] + b"z"), "€z"),
        (_frame(0x02, b"p1") + _frame(0x00, b"") + _frame(0x80, b"p2"), b"p1p2"),
        (_frame(0x82, b"tail"), b"tail"),
    ]
    raw = b"".join(f for f, _ in frames)
    return raw, [m for _, m in frames if m is not None], 2


async def _read_all(ws: LeanSocket, count: int) -> list[str | bytes]:
    return [await ws.receive() for _ in range(count)]


async def test_a_valid_stream_cut_at_every_offset(autojump_clock: trio.abc.Clock) -> None:
    """Cut once at each offset, as the bytes after the request head and one read, and as
    two reads: the same messages, the same Pongs, no fault."""
    raw, messages, pings = _mixed()
    for i in range(len(raw) + 1):
        ours, theirs = trio.testing.memory_stream_pair()
        ws = LeanSocket(
            ours,
            Connection(ConnectionType.SERVER),
            "192.0.2.1",
            silence_s=SILENCE_S,
            max_message=65536,
            initial=raw[:i],
        )
        await theirs.send_all(raw[i:])
        assert await _read_all(ws, len(messages)) == messages, i
        ws, box = pair()
        got: list[str | bytes] = []
        async with trio.open_nursery() as nursery:

            async def reader(ws: LeanSocket = ws, got: list[str | bytes] = got) -> None:
                got.extend(await _read_all(ws, len(messages)))

            nursery.start_soon(reader)
            await box.stream.send_all(raw[:i])
            await trio.testing.wait_all_tasks_blocked()
            await box.stream.send_all(raw[i:])
        assert got == messages and ws.fault is None, i
        box.conn.receive_data(await box.stream.receive_some(65536))
        assert [e for e in box.conn.events() if isinstance(e, Pong)] == [
            Pong(payload=b"ping"),
            Pong(payload=b""),
        ][:pings]


async def test_a_read_of_many_small_frames_lets_other_tasks_run(
    autojump_clock: trio.abc.Clock,
) -> None:
    """Frames wsproto judges cost more than the fast path's: after `CHECKPOINT_FRAMES` of
    them in one read the reader gives the scheduler a turn (here all of them come with the
    request head, so no socket read yields in between)."""
    pongs = _frame(0x8A, b"") * (10 * CHECKPOINT_FRAMES)
    ours, _theirs = trio.testing.memory_stream_pair()
    ws = LeanSocket(
        ours,
        Connection(ConnectionType.SERVER),
        "192.0.2.1",
        silence_s=SILENCE_S,
        max_message=65536,
        initial=pongs + _frame(0x82, b"end"),
    )
    turns = 0

    async def other() -> None:
        nonlocal turns
        while True:
            await trio.lowlevel.checkpoint()
            turns += 1

    async with trio.open_nursery() as nursery:
        nursery.start_soon(other)  # its first turn comes when this task yields
        assert await ws.receive() == b"end"
        assert turns >= 3  # 10 yields; trio may order a batch either way, so not all count
        nursery.cancel_scope.cancel()
