"""`decode_door_message`'s in-place read of `tun {sid, d}` gives, for every input it takes, the
envelope the general decoder gives, and leaves every other input (and every refusal) to it."""

from __future__ import annotations

import random

import cbor2
import pytest

from ftwbridge.proto.door import _tun_in_place, decode_door_message, tun
from ftwbridge.proto.envelope import Envelope, decode_envelope
from ftwbridge.proto.errors import LocalProtocolError, RemoteProtocolError
from ftwbridge.proto.registry import Msg


def verdict(decode: object, data: bytes) -> object:
    try:
        env = decode(data)  # type: ignore[operator]
    except RemoteProtocolError as exc:
        return ("refused", str(exc))
    return (type(env.t), env.t, env.id, env.b)


SIDS = (0, 1, 23, 24, 255, 256, 65535, 65536, 2**32 - 1, 2**32, 2**64 - 1)
SIZES = (0, 1, 23, 24, 255, 256, 1040, 65536 - 64)  # within the 64 KiB a message may take


@pytest.mark.parametrize("sid", SIDS)
@pytest.mark.parametrize("size", SIZES)
def test_tun_messages_as_written(sid: int, size: int) -> None:
    data = tun(sid, random.Random(size).randbytes(size))
    assert _tun_in_place(data) is not None  # read in place, not by the general decoder
    assert verdict(decode_door_message, data) == verdict(decode_envelope, data)


def test_cut_grown_and_mutated_tun_messages() -> None:
    rng = random.Random(7)
    samples = [tun(sid, rng.randbytes(n)) for sid in SIDS for n in (0, 5, 30, 300)]
    samples.append(cbor2.dumps({"t": "tun", "b": {"sid": 1, "d": b"x" * 70000}})[:70])
    samples.append(cbor2.dumps({"t": "tun", "b": {"sid": -1, "d": b"x"}}))
    samples.append(cbor2.dumps({"t": "tun", "b": {"sid": 1, "d": "text"}}))
    samples.append(cbor2.dumps({"t": "tun", "b": {"sid": 1, "d": b"x", "e": 0}}))
    inputs = []
    for data in samples:
        inputs += [data[:cut] for cut in range(len(data))]
        inputs += [data + b"\x00", data + data]
        for _ in range(40):
            b = bytearray(data)
            b[rng.randrange(len(b))] = rng.randrange(256)
            inputs.append(bytes(b))
    for data in inputs:
        assert verdict(decode_door_message, data) == verdict(decode_envelope, data), data


@pytest.mark.parametrize("sid", SIDS)
@pytest.mark.parametrize("size", SIZES)
def test_tun_is_written_as_the_envelope_encoder_writes_it(sid: int, size: int) -> None:
    d = random.Random(size).randbytes(size)
    assert tun(sid, d) == Envelope(Msg.TUN, None, {"sid": sid, "d": d}).encode()


@pytest.mark.parametrize("sid", [-1, 2**64])
def test_tun_refuses_a_sid_outside_u64(sid: int) -> None:
    with pytest.raises(LocalProtocolError):
        tun(sid, b"")


@pytest.mark.parametrize("sid", [True, False, 1.0, "1"])
def test_tun_refuses_a_sid_that_is_not_an_int(sid: object) -> None:
    # the encoder writes True as CBOR true (0xf5), not the uint 1 that `tun` would write
    with pytest.raises(LocalProtocolError, match="unsigned int, not"):
        tun(sid, b"")  # type: ignore[arg-type]
