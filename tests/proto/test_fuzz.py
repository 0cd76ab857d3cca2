"""Arbitrary bytes as frames, envelopes, rosters and transport messages raise only our errors."""

from __future__ import annotations

import contextlib

from hypothesis import given, settings
from hypothesis import strategies as st

from ftwbridge.proto.envelope import decode_envelope, dumps
from ftwbridge.proto.errors import ProtocolError
from ftwbridge.proto.frame import decode_frame
from ftwbridge.proto.noise import Responder, Transport, TransportKeys
from ftwbridge.proto.roster import verify_roster

KEYS = TransportKeys(b"\x01" * 32, b"\x02" * 32, b"\x03" * 32)
cbor_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text() | st.binary(),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4)
    ),
    max_leaves=12,
)


def _only_ours(fn: object, data: bytes) -> None:
    with contextlib.suppress(ProtocolError):
        fn(data)  # type: ignore[operator]


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=600))
def test_arbitrary_bytes(data: bytes) -> None:
    _only_ours(decode_frame, data)
    _only_ours(decode_envelope, data)
    _only_ours(lambda d: verify_roster(d, home_key=b"\x05" * 32, home="h"), data)
    _only_ours(Transport(KEYS).open, data)
    _only_ours(Responder(our_static=b"\x07" * 32).read_message1, data)


@settings(max_examples=200, deadline=None)
@given(cbor_values, st.binary(max_size=8))
def test_arbitrary_cbor(value: object, tail: bytes) -> None:
    raw = dumps({"t": "x", "b": value})
    _only_ours(decode_envelope, raw + tail)
    _only_ours(decode_envelope, dumps(value))
    _only_ours(lambda d: verify_roster(d, home_key=b"\x05" * 32, home="h"), dumps(value))
