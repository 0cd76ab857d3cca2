"""`scan`'s one-lookup path for items whole in their head gives every verdict, and every word of
it, that the table-driven scan before it gave: on every input of up to 2 bytes, alone and
inside a container; on every head byte followed by two heads of every kind; and on seeded
mutations of a box's answers. The reference
below is that earlier scan, kept as it was."""

from __future__ import annotations

import itertools
import random

import pytest

from ftwbridge.proto import envelope
from ftwbridge.proto.envelope import MAX_DEPTH, dumps, scan
from ftwbridge.proto.errors import RemoteProtocolError


def reference_scan(data: bytes) -> None:
    """The scan of the last round: three table lookups for every item."""
    act_, string, map_, bad = envelope._ATOM, envelope._STRING, envelope._MAP, envelope._BAD
    end, pos, left, in_map = len(data), 0, 1, False
    outer: list[tuple[int, bool]] = []
    while True:
        if pos >= end:
            raise RemoteProtocolError("CBOR ends inside an item")
        head = data[pos]
        pos += 1
        if in_map and not left & 1 and not envelope._KEY_OK[head]:
            raise envelope._bad_key(data, pos, end)
        act = envelope._ACT[head]
        if act == bad:
            raise envelope._bad(data, pos, end)
        arg = envelope._IMMEDIATE[head]
        if arg < 0:
            size = envelope._SIZE[head]
            if pos + size > end:
                raise RemoteProtocolError("CBOR ends inside an item's head")
            if act != act_:
                arg = int.from_bytes(data[pos : pos + size], "big")
            pos += size
        if act == string:
            if arg > end - pos:
                raise RemoteProtocolError("CBOR string runs past the end")
            pos += arg
        elif act != act_ and arg:
            count = arg * 2 if act == map_ else arg
            if count > end - pos:
                raise RemoteProtocolError("CBOR container runs past the end")
            if len(outer) >= MAX_DEPTH:
                raise RemoteProtocolError("CBOR nested too deep")
            outer.append((left - 1, in_map))
            left, in_map = count, act == map_
            continue
        left -= 1
        while not left:
            if not outer:
                if pos != end:
                    raise RemoteProtocolError(f"{end - pos} bytes after the CBOR item")
                return
            left, in_map = outer.pop()


def verdict(check: object, data: bytes) -> str:
    try:
        check(data)  # type: ignore[operator]
    except RemoteProtocolError as exc:
        return str(exc)
    return "ok"


def same(data: bytes) -> None:
    assert verdict(scan, data) == verdict(reference_scan, data), data.hex()


ANSWER = {
    "uptimeMs": 123456,
    "nowMs": 1796000000000,
    "mode": "planner_arbitrage",
    "fields": {"grid_w": -446, "pv_w": 2, "battery_soc": 500, "ok": True, "x": None},
    "sources": {"meter.p1": {"kind": "meter", "name": "P1 meter", "lastOkMs": 1000}},
    "blocked": [],
    "ratio": 0.5,
    "raw": b"\x00\x01" * 20,
    7: "an integer key",
}


@pytest.mark.parametrize("length", [1, 2])
def test_every_short_input(length: int) -> None:
    for data in itertools.product(range(256), repeat=length):
        same(bytes(data))


HEADS = bytes.fromhex(
    "00 17 18 1f 20 38 40 41 57 58 5f 60 61 77 78 7f 80 81 97 98 9f a0 a1 bf c0 d8 e0 f4 f5 f6 f7 f8 f9 fa fb fc ff"
)
"""A head byte of every kind: immediate, 1-byte and reserved arguments, indefinite lengths, each
major type, each simple value and float size."""


def test_every_head_followed_by_two_heads() -> None:
    for data in itertools.product(range(256), HEADS, HEADS):
        same(bytes(data))


@pytest.mark.parametrize("wrap", [b"\xa1\x61b", b"\x82\x00", b"\xa2\x01\x02\x61b"])
def test_every_two_byte_input_inside_a_container(wrap: bytes) -> None:
    for data in itertools.product(range(256), repeat=2):
        same(wrap + bytes(data))


def test_seeded_mutations_of_answers() -> None:
    rng = random.Random(2026)
    answers = [dumps(ANSWER), dumps({"t": "live", "id": 9, "b": ANSWER}), dumps([ANSWER] * 3)]
    for base in answers:
        same(base)
        for _ in range(4000):
            data = bytearray(base)
            for _ in range(rng.randint(1, 3)):
                if not data:
                    break
                at = rng.randrange(len(data))
                kind = rng.random()
                if kind < 0.6:
                    data[at] = rng.randrange(256)
                elif kind < 0.8:
                    del data[at:]
                else:
                    data[at:at] = bytes([rng.randrange(256)])
            same(bytes(data))
