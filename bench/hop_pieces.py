"""Pieces of the cluster hop counted alone, under callgrind (docs/performance.md, "The cluster
hop"): instructions per call of one piece, a figure load cannot move.

    .venv/bin/python bench/hop_pieces.py [--times 2000] [PIECE ...]

Each piece runs twice under valgrind's callgrind in a fresh process, once with its inputs made
and no calls, and once with `--times` calls too; the difference over the calls is one call's
instructions. Pieces (a
forward of the `status` call, its headers as `bench/hop_channel.py` sends them):

- `sign`: the entry's signature (`signing.sign`); `check`: the holder's check of it
  (`signing.Checker.check`, a new nonce each time);
- `answer`: the entry reading a holder's whole answer (`answer.AnswerReader`, as the
  channel does now); `answer-h11`: the same bytes read by an h11 client connection, told of
  its request first and recycled after, as the channel did before;
- `head`: the request's head written (`channel._request_head`);
- `wire`: the holder's side of the connection (`wire.HolderWire`): a forward's request
  bytes read into a whole request, its answer's bytes written, the next cycle begun.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from callgrind import dump_total  # type: ignore[import-not-found]

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

KEY = bytes(range(32))
BODY = b'{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"status","arguments":{}}}'
HEADERS = [
    ("content-type", "application/json"),
    ("accept", "application/json, text/event-stream"),
    ("mcp-protocol-version", "2026-07-28"),
    ("mcp-method", "tools/call"),
    ("mcp-name", "status"),
    ("ftw-budget-ms", "29000"),
]
ANSWER = (
    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nftw-holder: b2\r\n"
    b"mcp-protocol-version: 2026-07-28\r\ncontent-length: 580\r\n\r\n" + b"x" * 580
)
NOW_MS = 1_790_000_000_000


def _pieces() -> dict[str, Callable[[int, bool], None]]:
    import h11

    from ftwbridge.mesh import signing
    from ftwbridge.mesh.channel import _request_head

    digest = bytes(32)

    def sign(n: int, counted: bool) -> None:
        for _ in range(n if counted else 0):
            signing.sign(
                KEY, sender="b1", method="POST", path="/mcp", to="b2", epoch=3, body=BODY,
                now_ms=NOW_MS, headers=HEADERS, token_digest=digest,
            )  # fmt: skip

    def check(n: int, counted: bool) -> None:
        received = []
        for _ in range(n):  # inputs: made in both runs, so not counted
            made = signing.sign(
                KEY, sender="b1", method="POST", path="/mcp", to="b2", epoch=3, body=BODY,
                now_ms=NOW_MS, headers=HEADERS, token_digest=digest,
            )  # fmt: skip
            headers: dict[str, list[str]] = {}
            for k, v in [*HEADERS, *made.items()]:
                headers.setdefault(k, []).append(v)
            received.append(headers)
        checker = signing.Checker(KEY, "b2")
        for headers in received if counted else []:
            checker.check("POST", "/mcp", headers, BODY, NOW_MS)

    def answer(n: int, counted: bool) -> None:
        from ftwbridge.mesh.answer import AnswerReader  # not at revisions before it

        for _ in range(n if counted else 0):
            got = AnswerReader(1 << 24).feed(ANSWER)
            assert got is not None and got.keep

    def answer_h11(n: int, counted: bool) -> None:
        conn = h11.Connection(h11.CLIENT)
        frame = [("host", "b2"), ("content-length", str(len(BODY)))]
        for _ in range(n if counted else 0):
            conn.send(h11.Request(method="POST", target="/mcp", headers=frame))
            conn.send(h11.Data(data=BODY))
            conn.send(h11.EndOfMessage())
            conn.receive_data(ANSWER)
            head = conn.next_event()
            assert isinstance(head, h11.Response)
            [(k.decode("latin-1"), v.decode("latin-1")) for k, v in head.headers]
            while not isinstance(conn.next_event(), h11.EndOfMessage):
                pass
            conn.start_next_cycle()

    def head(n: int, counted: bool) -> None:
        for _ in range(n if counted else 0):
            _request_head("POST", "/mcp", "127.0.0.1:9000", HEADERS, len(BODY))

    def wire(n: int, counted: bool) -> None:
        from ftwbridge.mesh.wire import HolderWire, Request

        made = signing.sign(
            KEY, sender="b1", method="POST", path="/mcp", to="b2", epoch=3, body=BODY,
            now_ms=NOW_MS, headers=HEADERS, token_digest=digest,
        )  # fmt: skip
        sent = [*HEADERS, *made.items()]
        request = _request_head("POST", "/mcp", "127.0.0.1:9000", sent, len(BODY)) + BODY
        holder = HolderWire(now=0.0, max_body_bytes=1 << 20, body_s=10, idle_s=10, head_s=10)
        answer_headers = {"content-type": "application/json", "ftw-holder": "b2"}
        for _ in range(n if counted else 0):
            holder.receive_data(request, 0.0)
            assert isinstance(holder.next_event(), Request)
            holder.answer(200, answer_headers, ANSWER[-580:])
            assert holder.next_cycle(0.0)

    return {
        "sign": sign,
        "check": check,
        "answer": answer,
        "answer-h11": answer_h11,
        "head": head,
        "wire": wire,
    }


def _count(piece: str, times: int, counted: bool, tmp: Path) -> int:
    out = tmp / f"cg.{piece}.{counted}"
    argv = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"]
    argv += [sys.executable, __file__, "--inner", piece, "--times", str(times)]
    argv += [] if counted else ["--uncounted"]
    subprocess.run(argv, check=True, capture_output=True, cwd=tmp)
    return int(dump_total(out))


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("pieces", nargs="*", help="pieces to count (default: all)")
    p.add_argument("--times", type=int, default=2000, help="calls counted per piece (2000)")
    p.add_argument("--inner", help=argparse.SUPPRESS)
    p.add_argument("--uncounted", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.inner:
        _pieces()[args.inner](args.times, not args.uncounted)
        return
    names = args.pieces or list(_pieces())
    with tempfile.TemporaryDirectory() as t:
        for name in names:
            none = _count(name, args.times, False, Path(t))
            many = _count(name, args.times, True, Path(t))
            print(f"{name:11} {(many - none) / args.times / 1e3:8.1f} k instructions per call")


if __name__ == "__main__":
    main()
