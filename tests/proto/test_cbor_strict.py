"""Every tag and length form the CBOR decoder can meet, and what comes after the item."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ftwbridge.proto.envelope import Envelope, dumps, loads, scan
from ftwbridge.proto.errors import RemoteProtocolError
from ftwbridge.proto.frame import encode_frame
from ftwbridge.proto.noise import Transport, TransportKeys
from ftwbridge.proto.session import Channel

ARG_FORMS = [(info, b"") for info in (0, 1, 23)] + [
    (24, b"\x01"),
    (25, b"\x00\x01"),
    (26, b"\x00\x00\x00\x01"),
    (27, b"\x00" * 7 + b"\x01"),
]
"""Additional information 0..27 with the argument bytes that follow (the value is 0, 1, 23 or 1)."""


def _arg(info: int, extra: bytes) -> int:
    return info if info < 24 else int.from_bytes(extra, "big")


@pytest.mark.parametrize(("info", "extra"), ARG_FORMS)
@pytest.mark.parametrize("major", [0, 1, 2, 3, 4, 5])
def test_every_definite_length_form_is_read(major: int, info: int, extra: bytes) -> None:
    n = _arg(info, extra)
    pairs = b"".join(bytes([i, 0]) for i in range(n))  # keys 0..n-1 (n <= 23), values 0
    body = {2: b"a" * n, 3: b"a" * n, 4: b"\x00" * n, 5: pairs}.get(major, b"")
    value = loads(bytes([major << 5 | info]) + extra + body)
    expected = {0: n, 1: -1 - n, 2: b"a" * n, 3: "a" * n, 4: [0] * n}.get(major)
    assert value == ({i: 0 for i in range(n)} if major == 5 else expected)


@pytest.mark.parametrize("major", [0, 1, 2, 3, 4, 5, 6, 7])
@pytest.mark.parametrize("info", [28, 29, 30, 31])
def test_reserved_and_indefinite_forms_are_refused(major: int, info: int) -> None:
    with pytest.raises(RemoteProtocolError):
        loads(bytes([major << 5 | info]) + b"\x01\x01\xff")


TAGS = [0, 1, 2, 3, 4, 5, 21, 22, 23, 24, 25, 28, 29, 32, 33, 34, 35, 36, 37, 258, 55799, 2**32]


@pytest.mark.parametrize("tag", TAGS)
@pytest.mark.parametrize("where", ["top", "in a map", "in an array"])
def test_every_tag_is_refused(tag: int, where: str) -> None:
    """Bignums (2, 3) and self-describe (55799) too: cbor2 would decode those silently."""
    if tag < 24:
        head = bytes([0xC0 | tag])
    elif tag < 256:
        head = bytes([0xD8, tag])
    elif tag < 65536:
        head = b"\xd9" + tag.to_bytes(2, "big")
    else:
        head = b"\xdb" + tag.to_bytes(8, "big")
    item = head + b"\x41\x01"
    data = {"top": item, "in a map": b"\xa1\x61b" + item, "in an array": b"\x82\x01" + item}[where]
    with pytest.raises(RemoteProtocolError, match="tag"):
        loads(data)


@pytest.mark.parametrize(
    ("data", "ok"),
    [
        (b"\xf4", False),
        (b"\xf5", True),
        (b"\xf6", None),
        (b"\xf9\x3c\x00", 1.0),
        (b"\xfa\x3f\x80\x00\x00", 1.0),
        (b"\xfb\x3f\xf0" + b"\x00" * 6, 1.0),
    ],
)
def test_plain_simple_values_are_read(data: bytes, ok: object) -> None:
    assert loads(data) == ok


@pytest.mark.parametrize("data", [b"\xf7", b"\xe0", b"\xf3", b"\xf8\x20", b"\xff"])
def test_other_simple_values_are_refused(data: bytes) -> None:
    with pytest.raises(RemoteProtocolError):
        loads(data)


@pytest.mark.parametrize(
    "item", [b"\x01", b"\x41a", b"\x61a", b"\x80", b"\xa0", b"\x82\x01\x02", b"\xa1\x01\x02"]
)
@pytest.mark.parametrize("tail", [b"\x00", b"\xff", b"\x01\x02\x03"])
def test_bytes_after_the_item_are_refused(item: bytes, tail: bytes) -> None:
    assert loads(item) is not None
    with pytest.raises(RemoteProtocolError, match="after the CBOR item"):
        loads(item + tail)


@pytest.mark.parametrize("data", [b"", b"\x82\x01", b"\x42a", b"\x19\x01", b"\xa1\x01"])
def test_items_cut_short_are_refused(data: bytes) -> None:
    with pytest.raises(RemoteProtocolError):
        loads(data)


def test_depth_and_keys() -> None:
    loads(b"\x81" * 32 + b"\x01")
    with pytest.raises(RemoteProtocolError, match="deep"):
        loads(b"\x81" * 33 + b"\x01")
    for key in (b"\x41k", b"\xf5", b"\x80", b"\xa0", b"\xf9\x3c\x00"):
        with pytest.raises(RemoteProtocolError, match="key"):
            loads(b"\xa1" + key + b"\x01")


@settings(max_examples=300, deadline=None)
@given(
    st.recursive(
        st.none()
        | st.booleans()
        | st.integers(-(2**64), 2**64 - 1)
        | st.floats()
        | st.text()
        | st.binary(),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner),
        max_leaves=20,
    )
)
def test_whatever_we_write_we_read(value: object) -> None:
    scan(dumps(value))


def test_a_session_drops_a_frame_with_trailing_cbor() -> None:
    """In a session, a frame whose CBOR breaks the rules is dropped, not fatal (part A)."""
    keys = TransportKeys(b"\x01" * 32, b"\x02" * 32, b"\x03" * 32)
    sender = Transport(TransportKeys(keys.recv_key, keys.send_key, keys.handshake_hash))
    ours = Channel(keys)
    good = Envelope("live", 1, {"x": 1}).encode()
    assert ours.unwrap(sender.seal(encode_frame(good))) == Envelope("live", 1, {"x": 1})
    for bad in (good + b"\x00", b"\xc2\x41\x01", b"\xd9\xd9\xf7" + good):
        assert ours.unwrap(sender.seal(encode_frame(bad))) is None
