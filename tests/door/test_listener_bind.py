"""The door's own listener as the bridge starts it: bound beside the main listener, or refused
in one sentence that names `door_bind` when its port is taken (the main listener's socket
closed, nothing left open)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import trio

from ftwbridge.config import Config
from ftwbridge.lifecycle import StartupError
from ftwbridge.run import Bridge


async def test_a_taken_door_port_is_one_sentence(tmp_path: Path) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen(1)
        port = held.getsockname()[1]
        config = Config(
            state_dir=tmp_path,
            bind="127.0.0.1:0",
            admin_bind="127.0.0.1:0",
            door_bind=f"127.0.0.1:{port}",
        )
        with trio.fail_after(30), pytest.raises(StartupError) as caught:
            await Bridge(config).serve()
        assert "door listener cannot bind" in str(caught.value)
        assert caught.value.setting == "door_bind"


async def test_the_door_url_is_the_bound_listener(tmp_path: Path) -> None:
    config = Config(
        state_dir=tmp_path, bind="127.0.0.1:0", admin_bind=None, door_bind="127.0.0.1:0"
    )
    async with trio.open_nursery() as nursery:
        bridge = await nursery.start(Bridge(config).serve)
        assert bridge.door_url is not None and bridge.door_url.startswith("ws://127.0.0.1:")
        host, port = bridge.door_url.removeprefix("ws://").removesuffix("/v1/box").rsplit(":", 1)
        stream = await trio.open_tcp_stream(host, int(port))
        await stream.send_all(b"GET /nowhere HTTP/1.1\r\nHost: x\r\n\r\n")
        answer = b""
        while chunk := await stream.receive_some(4096):
            answer += chunk
        assert answer.startswith(b"HTTP/1.1 404 ")
        await stream.aclose()
        nursery.cancel_scope.cancel()
