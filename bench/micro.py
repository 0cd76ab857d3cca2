"""Micro figures: frames, transport messages, and answers translated and cleaned, per second."""

from __future__ import annotations

import argparse
import json
import struct
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ftwbridge.proto.clean import to_json
from ftwbridge.proto.envelope import Envelope, decode_envelope
from ftwbridge.proto.frame import decode_frame, encode_frame
from ftwbridge.proto.history import unpack_history
from ftwbridge.proto.noise import Transport, TransportKeys
from stubbox.home import Home


def rate(fn: Callable[[], object], seconds: float = 1.0) -> float:
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for _ in range(100):
            fn()
        n += 100
    return n / (time.perf_counter() - start)


def main() -> None:
    live = Home(seed=1).live(1_796_000_000_000, 1000)
    env = Envelope("live", 7, live)
    frame = encode_frame(env.encode(), lane=1)
    keys = TransportKeys(b"\x01" * 32, b"\x02" * 32, b"\x03" * 32)
    tx = Transport(keys)
    sealed = [tx.seal(frame) for _ in range(50_000)]
    state = {"i": 0, "rx": Transport(TransportKeys(b"\x02" * 32, b"\x01" * 32, b"\x03" * 32))}

    def open_one() -> None:
        i = state["i"]
        if i == len(sealed):  # a fresh receiver: its replay window would refuse a second pass
            state["i"] = i = 0
            state["rx"] = Transport(TransportKeys(b"\x02" * 32, b"\x01" * 32, b"\x03" * 32))
        state["rx"].open(sealed[i])  # type: ignore[attr-defined]
        state["i"] = i + 1

    points = 2000
    chunk = {
        "startMs": 0,
        "stepMs": 300_000,
        "series": ["pv_w"],
        "data": struct.pack(f"<{points}i", *range(points)),
    }
    out = {
        "frame encode (envelope + frame)": rate(lambda: encode_frame(env.encode(), lane=1)),
        "frame decode (frame + envelope)": rate(
            lambda: decode_envelope(decode_frame(frame).payload)
        ),
        "transport seal": rate(lambda: tx.seal(frame)),
        "transport open": rate(open_one),
        "status answer translated and cleaned": rate(lambda: to_json(live)),
        "2,000-point history unpacked and cleaned": rate(
            lambda: to_json(
                unpack_history([chunk], from_ms=0, to_ms=1 << 62, points=points).series
            ),
            0.5,
        ),
    }
    print(json.dumps({k: round(v) for k, v in out.items()}))


if __name__ == "__main__":
    argparse.ArgumentParser(description=__doc__).parse_args()
    main()
