"""The door's refusals an operator must see (docs/operations.md, "Faults: what each looks like"), on MockClock.

A box that dials with the wrong key is logged at most once a minute per home, the line after
the quiet minute says how many dials it held back, and every dial is counted. A key changed in
the store by another connection (what `ftwbridge home enroll` does beside a running bridge) is
noticed through `Store.write_mark` and closes the home's uplink.
"""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path

import pytest
import trio

from ftwbridge.admin import enroll
from ftwbridge.config import Config
from ftwbridge.door import Door
from ftwbridge.door.refusals import REFUSAL_LOG_S
from ftwbridge.door.rosters import HOME_KEY_CHECK_S
from ftwbridge.proto.door import CLOSE_BAD_SIGNATURE, door_signature
from ftwbridge.proto.envelope import Envelope, decode_envelope
from ftwbridge.proto.registry import Msg
from ftwbridge.store import SqliteStore
from stubbox.owner import Owner
from tests.harness import MemoryStore


class OneDial:
    """A box's WebSocket for one dial: answers the door's challenge with `door.hello` signed
    by `owner`'s key, then waits; `code` is the Close the door sent."""

    def __init__(self, owner: Owner) -> None:
        self.owner = owner
        self.sent: list[bytes] = []
        self.code: int | None = None
        self.closed = trio.Event()
        self.up = trio.Event()
        """Set when the door reads the uplink after `door.hello`: it let the box in."""

    async def send(self, data: bytes) -> None:
        self.sent.append(data)

    async def receive(self) -> bytes:
        if len(self.sent) == 1:
            nonce = decode_envelope(self.sent[0]).b["nonce"]
            sig = door_signature(self.owner.signing_key, nonce, self.owner.home)
            body = {"home": self.owner.home, "build": "t", "sig": sig}
            self.sent.append(b"")  # answered once
            return Envelope(Msg.DOOR_HELLO, None, body).encode()
        self.up.set()
        await self.closed.wait()
        raise trio.ClosedResourceError

    async def close(self, code: int, reason: str = "") -> None:
        if self.code is None:
            self.code = code
        self.closed.set()


async def dial(door: Door, ws: OneDial) -> None:
    """Run `ws`'s uplink until the door closes it (the box's socket then reads as closed)."""
    with contextlib.suppress(trio.ClosedResourceError):
        await door.serve_uplink(ws)


async def test_wrong_key_logged_once_a_minute_and_counted(
    autojump_clock: trio.abc.Clock, caplog: pytest.LogCaptureFixture
) -> None:
    store = MemoryStore()
    await store.enroll_home("h1", Owner("h1", seed="h1").home_public_key)
    door = Door(config=Config(), store=store)
    wrong = Owner("h1", seed="another box")
    for wait_s in (0, 10, 20, REFUSAL_LOG_S):  # the last dial is a minute after the first
        await trio.sleep(wait_s)
        ws = OneDial(wrong)
        await door.serve_uplink(ws)
        assert ws.code == CLOSE_BAD_SIGNATURE
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(lines) == 2, lines
    assert "uplink refused home=h1" in lines[0] and "bad signature" in lines[0]
    assert "(2 more like it since the last line)" in lines[1]
    assert door.stats.uplinks_refused_by == {"bad_signature": 4}


async def test_unknown_home_text_is_cleaned(
    autojump_clock: trio.abc.Clock, caplog: pytest.LogCaptureFixture
) -> None:
    door = Door(config=Config(), store=MemoryStore())
    stranger = Owner("evil\nhome=forged\x1b[2J", seed="x")
    await door.serve_uplink(OneDial(stranger))
    (line,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "\n" not in line and "\x1b" not in line and "unknown home" in line
    assert door.stats.uplinks_refused_by == {"unknown_home": 1}


async def test_a_key_enrolled_by_another_process_closes_the_uplink(
    nursery: trio.Nursery, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    old, new = Owner("h1", seed="old box"), Owner("h1", seed="new box")
    store = SqliteStore(tmp_path / "bridge.sqlite")
    await store.enroll_home("h1", old.home_public_key)
    door = Door(config=Config(), store=store)
    await nursery.start(door.watch_home_keys)
    ws = OneDial(old)
    nursery.start_soon(dial, door, ws)
    with trio.fail_after(5):
        await ws.up.wait()
    assert door.online("h1")
    config = Config(state_dir=tmp_path)
    assert await enroll(config, "h1", old.home_public_key.hex()) == 0  # the same key: no-op
    await trio.sleep(2 * HOME_KEY_CHECK_S)
    assert door.online("h1") and door.stats.home_key_changes == 0
    assert await enroll(config, "h1", new.home_public_key.hex()) == 0
    with trio.fail_after(5 * HOME_KEY_CHECK_S):
        await ws.closed.wait()
    assert ws.code == CLOSE_BAD_SIGNATURE and door.stats.home_key_changes == 1
    assert any("home key changed home=h1 (re-enrolled)" in r.getMessage() for r in caplog.records)
    ws2 = OneDial(new)  # the new box is let in with the new key
    nursery.start_soon(dial, door, ws2)
    with trio.fail_after(5):
        await ws2.up.wait()
    assert door.online("h1")
    assert ws2.code is None
    nursery.cancel_scope.cancel()
    store.close()


async def test_enroll_says_what_it_did(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = Config(state_dir=tmp_path)
    a, b = Owner("h1", seed="a").home_public_key.hex(), Owner("h1", seed="b").home_public_key.hex()
    assert await enroll(config, "h1", a) == 0
    assert capsys.readouterr().out == "enrolled h1\n"
    assert await enroll(config, "h1", a) == 0
    assert "already enrolled with this key; nothing changed" in capsys.readouterr().out
    assert await enroll(config, "h1", b) == 0
    assert capsys.readouterr().out.startswith("re-enrolled h1 with a new key")
