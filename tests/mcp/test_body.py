"""`asgi.read_body`: a body hypercorn queued whole, or whose declared length has come, is taken
without a cancel scope or a turn; the rest keeps its bounds in bytes and seconds."""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

import pytest
import trio
import trio.testing

from ftwbridge.mcp.asgi import read_body
from ftwbridge.mcp.server import BodyGone, BodyTooLarge, BodyTooSlow

Event = MutableMapping[str, Any]


def _queued(*events: Event) -> tuple[trio.MemorySendChannel[Event], Any]:
    send, receive = trio.open_memory_channel[Event](len(events) + 2)
    for event in events:
        send.send_nowait(event)
    return send, receive.receive


def _part(data: bytes, more: bool = True) -> Event:
    return {"type": "http.request", "body": data, "more_body": more}


@pytest.mark.parametrize("length", [None, 7, 99])
async def test_a_body_queued_with_its_end_is_taken_without_a_turn(length: int | None) -> None:
    _send, receive = _queued(_part(b"abc"), _part(b"defg"), _part(b"", more=False))
    with trio.testing.assert_no_checkpoints():  # neither a scope's wait nor a receive
        assert await read_body(receive, 100, 1.0, length) == b"abcdefg"


async def test_a_body_whose_declared_length_came_needs_not_its_end() -> None:
    _send, receive = _queued(_part(b"abc"), _part(b"defg"))  # h11's end event not yet queued
    with trio.testing.assert_no_checkpoints():
        assert await read_body(receive, 100, 1.0, 7) == b"abcdefg"
    _send, receive = _queued(_part(b""))
    with trio.testing.assert_no_checkpoints():
        assert await read_body(receive, 100, 1.0, 0) == b""


async def test_the_rest_is_awaited_within_the_time_bound(autojump_clock: Any) -> None:
    send, receive = _queued(_part(b"abc"))

    async def later() -> None:
        await trio.sleep(0.5)
        await send.send(_part(b"defg", more=False))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(later)
        assert await read_body(receive, 100, 1.0, None) == b"abcdefg"
    _send, receive = _queued(_part(b"abc"))  # short of its length, and nothing more comes
    with pytest.raises(BodyTooSlow):
        await read_body(receive, 100, 1.0, 7)
    _send, receive = _queued(_part(b"abcdefg"))  # without a length: its end is needed
    with pytest.raises(BodyTooSlow):
        await read_body(receive, 100, 1.0, None)


async def test_size_and_a_client_gone_are_checked_on_queued_events() -> None:
    _send, receive = _queued(_part(b"x" * 60), _part(b"x" * 60), _part(b"", more=False))
    with pytest.raises(BodyTooLarge):
        await read_body(receive, 100, 1.0, 120)
    _send, receive = _queued(_part(b"abc"), {"type": "http.disconnect"})
    with pytest.raises(BodyGone):
        await read_body(receive, 100, 1.0, 7)
