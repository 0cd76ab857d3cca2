"""The stub home's owner state at rest (`--state`, stubbox/state.py): it round-trips through
its file, a damaged file is refused in one sentence, and a failed write changes nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from ftwbridge.proto.envelope import Envelope, decode_envelope
from ftwbridge.proto.registry import Msg
from ftwbridge.proto.roster import AgentGrant
from stubbox.owner import Owner
from stubbox.state import StateError, decode_state, encode_state, load_state, state_path
from stubbox.uplink import StubHome

WAIT_S = 30.0
"""Bound on a real-time wait here (a thread's write, a process's start on a busy machine)."""

AGENT = b"\x01" * 32
GRANT = AgentGrant("a1", "c", "Assistant", ("ftw.live.read",), (), {"reads_per_min": 30}, 1, 2**62)


async def test_the_owner_goes_on_from_the_kept_roster(tmp_path: Path) -> None:
    path = state_path(tmp_path / "state", "h1")
    first = StubHome("h1", seed="h1")
    with trio.fail_after(WAIT_S):
        await first.keep_state(path)  # no file yet: written at once, seq 1
        assert json.loads(path.read_text())["seq"] == 1
        assert await first.put_agent(AGENT, GRANT) == 2
        again = StubHome("h1", seed="h1")  # a restart
        await again.keep_state(path)
    assert again.owner.signed == first.owner.signed
    assert again.owner.roster.seq == 2 and again.owner.roster.agents() == {AGENT: GRANT}
    assert again.box.roster.agents() == {AGENT: GRANT}  # the box admits the granted agent
    with trio.fail_after(WAIT_S):
        assert await again.drop_agent(AGENT) == 3  # the next roster has the next seq
    kept = await load_state(path, home="h1", home_key=again.owner.home_public_key)
    assert kept is not None and kept.roster.seq == 3 and kept.roster.agents() == {}
    assert os.listdir(path.parent) == ["h1.json"]  # no temporary file left behind


def test_file_names_are_plain_whatever_the_home_id(tmp_path: Path) -> None:
    assert state_path(tmp_path, "demo-home") == tmp_path / "demo-home.json"
    assert state_path(tmp_path, "../x/y").parent == tmp_path


def test_waiting_requests_round_trip() -> None:
    owner = Owner("h1", seed="h1")
    request = {
        "req": "r1",
        "client": "https://client.example/meta.json",
        "name": "An assistant",
        "redirectHost": "client.example",
        "scopes": ["ftw.live.read"],
        "ops": [],
        "caps": {"reads_per_min": 10},
        "key": AGENT,
        "expiresAtMs": 1_790_000_000_000,
    }
    data = encode_state(
        home="h1",
        home_key=owner.home_public_key,
        signed=owner.signed,
        seq=1,
        requests={"r1": request},
    )
    kept = decode_state(data, path=Path("h1.json"), home="h1", home_key=owner.home_public_key)
    assert kept.requests == {"r1": request}
    assert kept.roster.signed == owner.signed


class AskingDoor:
    """A door that challenges, then passes one `agent.request`, then stays quiet;
    `asked_on` is set when the box reads past the request (it has handled it)."""

    def __init__(self, request: dict[str, Any]) -> None:
        self.inbox = [
            Envelope(Msg.DOOR_CHALLENGE, None, {"nonce": os.urandom(16), "nowMs": 0}).encode(),
            Envelope(Msg.AGENT_REQUEST, None, request).encode(),
        ]
        self.asked_on = trio.Event()

    async def get_message(self) -> bytes:
        if self.inbox:
            return self.inbox.pop(0)
        self.asked_on.set()
        await trio.sleep_forever()
        raise AssertionError

    async def send_message(self, data: Any) -> None:
        decode_envelope(data)


async def test_a_waiting_request_outlives_a_restart(tmp_path: Path, nursery: trio.Nursery) -> None:
    path = state_path(tmp_path, "h1")
    stub = StubHome("h1", seed="h1")
    request = {"req": "r1", "client": "c", "name": "A", "scopes": ["ftw.live.read"], "key": AGENT}
    door = AskingDoor(request)
    with trio.fail_after(WAIT_S):
        await stub.keep_state(path)
        nursery.start_soon(stub.run_session, door)  # type: ignore[arg-type]
        await door.asked_on.wait()
        again = StubHome("h1", seed="h1")
        await again.keep_state(path)
        assert again.requests == {"r1": request}
        assert await again.approve("r1") == 2  # the owner answers after the restart
    assert again.owner.roster.agents()[AGENT].scopes == ("ftw.live.read",)
    assert json.loads(path.read_text())["requests"] == []


def _other_seed_file(path: Path) -> bytes:
    other = Owner("h1", seed="other")
    return encode_state(
        home="h1", home_key=other.home_public_key, signed=other.signed, seq=1, requests={}
    )


def _tampered(path: Path) -> bytes:
    owner = Owner("h1", seed="h1")
    doc = json.loads(
        encode_state(
            home="h1", home_key=owner.home_public_key, signed=owner.signed, seq=1, requests={}
        )
    )
    doc["roster"] = doc["roster"][:-2] + ("00" if doc["roster"][-2:] != "00" else "01")
    return json.dumps(doc).encode()


def _field(**change: Any) -> Any:
    def make(path: Path) -> bytes:
        owner = Owner("h1", seed="h1")
        data = encode_state(
            home="h1", home_key=owner.home_public_key, signed=owner.signed, seq=1, requests={}
        )
        return json.dumps(json.loads(data) | change).encode()

    return make


DAMAGED = {
    "not JSON": lambda path: b'{"v": 1, "home": "h1", "ro',
    "not UTF-8": lambda path: b"\xff\xfe\x00",
    "a list": lambda path: b"[]",
    "a newer version": _field(v=2),
    "another home": _field(home="h2"),
    "another seed": _other_seed_file,
    "a roster not hex": _field(roster="zz"),
    "a roster tampered with": _tampered,
    "a bad request": _field(requests=[{"req": "r1", "key": "00"}]),
}


@pytest.mark.parametrize("case", list(DAMAGED))
async def test_a_damaged_file_is_refused_in_one_sentence(tmp_path: Path, case: str) -> None:
    path = state_path(tmp_path, "h1")
    path.write_bytes(DAMAGED[case](path))
    with trio.fail_after(WAIT_S), pytest.raises(StateError) as caught:
        await StubHome("h1", seed="h1").keep_state(path)
    sentence = str(caught.value)
    assert str(path) in sentence and "\n" not in sentence
    assert "move it aside" in sentence or "--seed" in sentence


async def test_an_unreadable_file_is_refused_in_one_sentence(tmp_path: Path) -> None:
    path = state_path(tmp_path, "h1")
    path.mkdir()  # a folder where the file should be: reading it fails
    with trio.fail_after(WAIT_S), pytest.raises(StateError, match="cannot read the state file"):
        await StubHome("h1", seed="h1").keep_state(path)


async def test_a_failed_write_changes_nothing(tmp_path: Path) -> None:
    folder = tmp_path / "state"
    stub = StubHome("h1", seed="h1")
    with trio.fail_after(WAIT_S):
        await stub.keep_state(state_path(folder, "h1"))
        signed = stub.owner.signed
        for name in os.listdir(folder):
            os.unlink(folder / name)
        folder.rmdir()
        folder.write_text("a file where the folder was")  # every write now fails
        with pytest.raises(StateError, match="cannot write the state file"):
            await stub.put_agent(AGENT, GRANT)
    assert stub.owner.signed == signed and stub.owner.roster.seq == 1
    assert stub.box.roster.agents() == {}


async def test_the_process_says_one_sentence_and_exits_2(tmp_path: Path) -> None:
    state_path(tmp_path, "h1").write_text("{")
    argv = [sys.executable, "-m", "stubbox", "--home", "h1", "--seed", "h1"]
    argv += ["--bridge", "ws://127.0.0.1:9/v1/box", "--state", str(tmp_path)]
    with trio.fail_after(WAIT_S):
        done = await trio.run_process(
            argv, stdin=subprocess.DEVNULL, capture_stdout=True, capture_stderr=True, check=False
        )
    err = done.stderr.decode()
    assert done.returncode == 2, err
    assert err.startswith(f"stubbox: the state file {state_path(tmp_path, 'h1')} is not usable")
    assert err.count("\n") == 1 and "Traceback" not in err and done.stdout == b""


@pytest.mark.parametrize("door", ["http://127.0.0.1:9/v1/box", "ws://h:9/v1/box,127.0.0.1:9", ""])
async def test_a_door_url_that_is_no_websocket_url_is_one_sentence(door: str) -> None:
    argv = [sys.executable, "-m", "stubbox", "--home", "h1", "--seed", "h1", "--bridge", door]
    with trio.fail_after(WAIT_S):
        done = await trio.run_process(
            argv, stdin=subprocess.DEVNULL, capture_stdout=True, capture_stderr=True, check=False
        )
    err = done.stderr.decode()
    assert done.returncode == 2, err
    assert err.startswith("stubbox: --bridge ") and "is not a door URL; give ws://" in err
    assert err.count("\n") == 1 and "Traceback" not in err and done.stdout == b""
