"""The cleaner on hostile strings, JSON-safety of CBOR values, and token-bucket arithmetic."""

from __future__ import annotations

import math

import pytest

from ftwbridge.proto.clean import clean, to_json
from ftwbridge.proto.pacing import TokenBucket

HOSTILE = [
    ("pv\u202eevil\u202c", "pvevil"),  # bidi override and pop
    ("a\u2066b\u2069c", "abc"),  # bidi isolates
    ("zero\u200bwidth\u200d\ufeff", "zerowidth"),  # zero-width space, joiner, BOM
    ("tag\U000e0049\U000e0067\U000e006e", "tag"),  # tag characters (hidden ASCII)
    ("red \x1b[31mALERT\x1b[0m done", "red ALERT done"),  # ANSI SGR, whole
    ("title\x1b]0;pwned\x07 ok", "title ok"),  # OSC, whole
    ("csi8\x9b2Jx", "csi8x"),  # 8-bit CSI
    ("bell\x07nul\x00del\x7f c1\x85", "bellnuldel c1"),  # C0, DEL, C1
    ("keep\ttab\nnewline", "keep\ttab\nnewline"),
    ("private\ue000\U000f0000use", "privateuse"),
    ("vs\ufe0f\U000e0100sel", "vssel"),
    ("cg\u034fj", "cgj"),
    ("fill\u3164\u115f\u1160\uffa0\u2800er", "filler"),
    ("soft\u00adhyphen", "softhyphen"),
    ("Grüße, 日本語, emoji 🔋", "Grüße, 日本語, emoji 🔋"),
]


@pytest.mark.parametrize(("dirty", "want"), HOSTILE)
def test_cleaner(dirty: str, want: str) -> None:
    assert clean(dirty) == want


def test_to_json() -> None:
    value = {
        1: b"\xff\xfe",
        "k\u200b": [math.nan, math.inf, 1.5, None, True],
        2: {"x": "a\x1b[1mb"},
    }
    assert to_json(value) == {"1": "__4", "k": [None, None, 1.5, None, True], "2": {"x": "ab"}}


def test_bucket_exact_arithmetic() -> None:
    b = TokenBucket(burst=15, rate=0.75)
    for _ in range(15):
        assert b.try_take(100.0)
    assert not b.try_take(100.0)
    assert b.wait_s(100.0) == pytest.approx(1 / 0.75)
    assert b.try_take(100.0 + 4 / 3)
    assert b.tokens(100.0 + 4 / 3) == pytest.approx(0.0)
    assert b.tokens(1000.0) == 15  # never past the burst


def test_bucket_debt_and_big_costs() -> None:
    b = TokenBucket(burst=1024, rate=128)
    b.charge(0.0, 2048)  # bytes already moved leave a debt
    assert b.tokens(0.0) == -1024
    assert b.wait_s(0.0, 1) == pytest.approx(1025 / 128)
    full = TokenBucket(burst=10, rate=1)
    assert full.try_take(0.0, 50)  # more than the burst: allowed from a full bucket
    assert full.wait_s(0.0, 1) == 41


def test_bucket_refuses_nonsense() -> None:
    with pytest.raises(ValueError):
        TokenBucket(burst=0, rate=1)
