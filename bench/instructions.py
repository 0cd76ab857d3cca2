"""`make bench-instructions`: instructions per call under callgrind, a figure load cannot move.

Requests per second and CPU time per call move with whatever else the machine runs (on a busy
2-core machine the same build gave the bridge 0.3x to 0.9x sdk-trio's rate from one run to the
next). valgrind's callgrind counts the instructions a process executes, which depend only on
the code and its inputs. This starts each server under callgrind with counting off, sends
warm-up calls, turns counting on (`callgrind_control -i on`), sends `--calls` sequential
`status` calls on one keep-alive connection (as `make bench`'s 1-connection case), turns it
off, and reads the total. Cases: the bridge in this checkout (bridged for real to 4 stub homes,
2 agents each, in another process that callgrind does not count), the official SDK's in-memory
server on hypercorn's trio worker (`sdk-trio`) and on uvicorn (`sdk-uvicorn`), the official
TypeScript SDK's stateless server on Node (`sdk-ts`, `bench/ts_server.mjs`; callgrind runs
Node's JIT-compiled code with `--smc-check=all-non-file`, and counts every thread of the
process, V8's compiler and collector threads included), and with `--base REV` the bridge at
that git revision (checked out in a temporary worktree, run with this checkout's virtualenv).
`--only NAME` (repeatable) measures those cases alone. `perf stat` would count faster, but
this machine's kernel gives no instruction counter (`perf stat -e instructions true` says
"not supported").

What a server does with no calls (its timers, the homes' pings) is counted too, in proportion
to the calls' own time, and a loaded machine makes the calls slower, so the same build can
count a few percent more in one run than in another; `--idle S` counts each server for S
seconds with no calls first and takes that rate off the calls' count.

Prints millions of instructions per call and each case's ratio to sdk-trio; writes
`bench/results/<date>-instructions.json` (not with `--only`), and with `--json` prints the result as the last line.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import http.client
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from callgrind import dump_total  # type: ignore[import-not-found]
from run import (
    BENCH,
    MODERN_BODY,
    MODERN_HEADERS,
    NODE,
    PY,
    ROOT,
    TS_SERVER,
    free_port,
    live_json,
    stop,
    wait_port,
)

HEADERS = dict(line.split(": ", 1) for line in MODERN_HEADERS.strip().splitlines())
WARM_CALLS = 40


def _post(conn: http.client.HTTPConnection, token: str) -> None:
    conn.request(
        "POST", "/mcp", json.dumps(MODERN_BODY), HEADERS | {"Authorization": f"Bearer {token}"}
    )
    resp = conn.getresponse()
    data = resp.read()
    if resp.status != 200 or b'"isError":true' in data:
        raise RuntimeError(f"call failed: {resp.status} {data[:200]!r}")


@dataclass(frozen=True)
class Server:
    """One measured server: `argv(port)` starts it; `bridged` ones take `--tokens FILE` and
    say "ready" on stdout, the others take the fixed bench token once the port answers;
    `valgrind` adds options for it (Node's JIT needs `--smc-check`)."""

    name: str
    root: Path
    argv: Callable[[int], list[str]]
    bridged: bool = False
    valgrind: tuple[str, ...] = ()


def servers(base: Path | None, rev: str | None) -> list[Server]:
    """The cases: sdk-trio, sdk-uvicorn, sdk-ts, the bridge, and the bridge at `rev`."""
    fleet = ["--homes", "4", "--agents", "2"]
    sdk = str(BENCH / "sdk_server.py")
    out = [
        Server("sdk-trio", ROOT, lambda p: [PY, sdk, "--stack", "trio", "--port", str(p)]),
        Server("sdk-uvicorn", ROOT, lambda p: [PY, sdk, "--stack", "uvicorn", "--port", str(p)]),
        Server(
            "sdk-ts",
            ROOT,
            lambda p: [str(NODE), str(TS_SERVER), str(p), live_json()],
            valgrind=("--smc-check=all-non-file",),
        ),
        Server(
            "bridge",
            ROOT,
            lambda p: [PY, str(BENCH / "bridge_server.py"), *fleet, "--port", str(p)],
            bridged=True,
        ),
    ]
    if base is not None and rev is not None:
        script = str(base / "bench" / "bridge_server.py")
        out.append(
            Server(f"bridge@{rev}", base, lambda p: [PY, script, *fleet, "--port", str(p)], True)
        )
    return out


def _control(pid: int, *args: str) -> None:
    subprocess.run(["callgrind_control", *args, str(pid)], check=True, capture_output=True)


def _newest_dump(out: Path) -> int:
    """The count of the newest numbered dump beside `out` (`out.1`, `out.2`, ...)."""
    dumps = [f for f in out.parent.glob(out.name + ".*") if f.suffix[1:].isdigit()]
    return dump_total(max(dumps, key=lambda f: int(f.suffix[1:])))


def _counted(pid: int, out: Path, work: Callable[[], None]) -> tuple[int, float]:
    """(instructions, seconds) of `pid` while `work()` runs, counting on only meanwhile."""
    _control(pid, "-z")
    _control(pid, "-i", "on")
    started = time.monotonic()
    work()
    seconds = time.monotonic() - started
    _control(pid, "-i", "off")
    _control(pid, "-d")
    return _newest_dump(out), seconds


def measure(server: Server, calls: int, tmp: Path, idle_s: float = 0.0) -> float:
    """Millions of instructions per call of `server` (under callgrind); with `idle_s`, less
    what it does with no calls (its timers, the homes' pings), counted for `idle_s` seconds
    first and taken off in proportion to the calls' own time."""
    port = free_port()
    name = server.name.replace("/", "_")
    out = tmp / f"callgrind.{name}.out"
    tokens = tmp / f"{name}.tokens"
    cmd = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}"]
    cmd += [*server.valgrind, *server.argv(port)]
    if server.bridged:
        cmd += ["--tokens", str(tokens)]
    proc = subprocess.Popen(
        cmd,
        cwd=server.root,
        env=os.environ | {"PYTHONPATH": str(server.root)},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        if server.bridged:
            assert proc.stdout is not None
            if proc.stdout.readline().strip() != b"ready":
                raise RuntimeError(f"{server.name} did not get ready")
            token_list = json.loads(tokens.read_text())
        else:
            wait_port(port, proc, seconds=300)
            token_list = ["bench-token"]
        # before the connection opens: the keep-alive timeout would close it meanwhile
        idle, idle_took = _counted(proc.pid, out, lambda: time.sleep(idle_s)) if idle_s else (0, 1)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
        for i in range(WARM_CALLS):
            _post(conn, token_list[i % len(token_list)])

        def send() -> None:
            for i in range(calls):
                _post(conn, token_list[i % len(token_list)])

        counted, took = _counted(proc.pid, out, send)
        conn.close()
    finally:
        stop(proc)
    return (counted - idle / idle_took * took) / calls / 1e6


@contextlib.contextmanager
def checkout(rev: str) -> Iterator[Path]:
    """A temporary git worktree of `rev`, removed afterwards."""
    with tempfile.TemporaryDirectory() as t:
        path = Path(t) / "base"
        subprocess.run(
            ["git", "worktree", "add", "-q", "--detach", str(path), rev], cwd=ROOT, check=True
        )
        try:
            yield path
        finally:
            subprocess.run(
                ["git", "worktree", "remove", "--force", str(path)], cwd=ROOT, check=False
            )


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--calls", type=int, default=200, help="counted calls per case")
    p.add_argument("--base", help="also measure the bridge at this git revision")
    p.add_argument("--only", action="append", help="measure this case alone (repeatable)")
    p.add_argument("--json", action="store_true", help="print the result as JSON, last")
    p.add_argument("--keep", help="keep callgrind's files in this folder (for callgrind_annotate)")
    p.add_argument(
        "--idle",
        type=float,
        default=0.0,
        help="count each server with no calls for this many seconds first and take that work"
        " off in proportion to the calls' time (timers and pings, which a loaded machine's"
        " slower calls count more of)",
    )
    args = p.parse_args()
    results: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as t, contextlib.ExitStack() as stack:
        base = stack.enter_context(checkout(args.base)) if args.base else None
        out = Path(args.keep or t)
        out.mkdir(parents=True, exist_ok=True)
        for server in servers(base, args.base):
            if args.only and server.name not in args.only:
                continue
            started = time.monotonic()
            results[server.name] = measure(server, args.calls, out.resolve(), args.idle)
            print(
                f"{server.name:24} {results[server.name]:7.3f} M instructions per call "
                f"({args.calls} calls, {time.monotonic() - started:.0f} s)",
                flush=True,
            )
    for name, value in results.items():
        if name != "sdk-trio" and "sdk-trio" in results:
            print(f"{name} / sdk-trio: {value / results['sdk-trio']:.2f}x")
    result = {"calls": args.calls, "mega_instructions_per_call": results}
    if not args.only:  # a partial run leaves the day's figures alone
        out = BENCH / "results" / f"{dt.date.today().isoformat()}-instructions.json"
        out.write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {out.relative_to(ROOT)}")
    if args.json:
        print(json.dumps(result))


if __name__ == "__main__":
    sys.exit(main())
