"""The keys requests' answers (keys/ops.py): whatever a peer sends, and whatever fails while
serving it, the answer is a map in the protocol's own form, never an exception."""

from __future__ import annotations

from pathlib import Path

import pytest

from ftwbridge.keys import KeysService
from ftwbridge.keys.ops import answer, as_bytes, as_list, result
from ftwbridge.keys.service import BadHandshakeMessage, KeysError, UnknownAgentKey


@pytest.mark.parametrize(
    ("request_", "words"),
    [
        ("not a map", "request is not a map"),
        ({"op": "launch"}, "unknown op 'launch'"),
        ({"op": "begin", "key": 10**9, "noise": b""}, "malformed request (TypeError: key)"),
        ({"op": "finish"}, "malformed request (TypeError: handle)"),
        ({"op": "abort", "handle": True}, "malformed request (TypeError: handle)"),
        ({"op": "sync", "home": "h", "listed": [b"k", 1]}, "malformed request (TypeError: listed)"),
        ({"op": "create", "home": ["h"]}, "malformed request (TypeError: home)"),
        (
            {"op": "begin", "key": b"k" * 32, "noise": b"abc"},
            "the keys part holds no such agent key",
        ),
        ({"op": "has", "key": b"k"}, None),
    ],
)
async def test_any_request_gets_an_answer_map(request_: object, words: str | None) -> None:
    reply = await answer(KeysService(None), request_)
    if words is None:
        assert reply == {"ok": False}
    else:
        assert reply["err"] == words


async def test_a_key_file_that_cannot_be_written_is_an_answer_not_a_crash(
    tmp_path: Path,
) -> None:
    service = KeysService(tmp_path / "gone" / "agent-keys.json")
    (tmp_path / "gone").write_text("a file where the folder was")
    reply = await answer(service, {"op": "create", "home": "h1"})
    assert reply == {"err": "the keys part cannot write its key file now"}


def test_answers_are_checked_before_use() -> None:
    with pytest.raises(KeysError, match="nonsense"):
        result(["not", "a", "map"])
    with pytest.raises(UnknownAgentKey, match="no such agent") as refused:
        result({"err": "no such agent", "unknownKey": True})
    assert refused.value.unknown_key and not refused.value.bad_message
    with pytest.raises(BadHandshakeMessage, match="bad m2"):
        result({"err": "bad m2", "badMessage": True})
    with pytest.raises(KeysError) as plain:
        result({"err": "busy", "unknownKey": False})
    assert type(plain.value) is KeysError
    with pytest.raises(KeysError, match="nonsense"):
        as_bytes(None)
    with pytest.raises(KeysError, match="nonsense"):
        as_list([b"k", "text"])
    assert as_list([b"k"]) == [b"k"] and as_bytes(b"k") == b"k"


async def test_a_box_key_of_the_wrong_size_is_refused_in_words() -> None:
    service = KeysService(None)
    key = await service.create("h1")
    for noise in (b"", b"abc", b"x" * 33):
        reply = await answer(service, {"op": "begin", "key": key, "noise": noise})
        assert reply["err"] == "box Noise key must be 32 bytes"
    assert service.pending_handshakes == 0
