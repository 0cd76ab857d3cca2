"""`make bench-instructions`: instructions per call under callgrind, a figure load cannot move.

Requests per second and CPU time per call move with whatever else the machine runs (on a busy
2-core machine the same build gave the bridge 0.3x to 0.9x sdk-trio's rate from one run to the
next). valgrind's callgrind counts the instructions a process executes, which depend only on
the code and its inputs. This starts each server under callgrind with counting off, sends
warm-up calls, turns counting on (`callgrind_control -i on`), sends `--calls` sequential
`status` calls on one keep-alive connection (as `make bench`'s 1-connection case), turns it
off, and reads the total. Cases: the bridge in this checkout (bridged for real to 4 stub homes,
2 agents each, in another process that callgrind does not count), the official SDK's in-memory
server on hypercorn's trio worker (`sdk-trio`), and with `--base REV` the bridge at that git
revision (checked out in a temporary worktree, run with this checkout's virtualenv).

Prints millions of instructions per call and the bridge's ratio to sdk-trio; writes
`bench/results/<date>-instructions.json`.
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
from collections.abc import Iterator
from pathlib import Path

from run import BENCH, MODERN_BODY, MODERN_HEADERS, PY, ROOT, free_port, stop, wait_port

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


def _total(out: Path) -> int:
    total = 0
    for f in out.parent.glob(out.name + "*"):
        for line in f.read_text(errors="replace").splitlines():
            if line.startswith(("totals:", "summary:")):
                total = max(total, int(line.split()[1]))
    return total


def measure(
    name: str, argv: list[str], root: Path, tokens: Path | None, calls: int, tmp: Path
) -> float:
    """Millions of instructions per call of the server that `argv` starts (under callgrind)."""
    port = free_port()
    out = tmp / f"callgrind.{name}.out"
    cmd = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}"]
    cmd += [PY, *argv, "--port", str(port)]
    if tokens is not None:
        cmd += ["--tokens", str(tokens)]
    env = os.environ | {"PYTHONPATH": str(root)}
    proc = subprocess.Popen(
        cmd,
        cwd=root,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        if tokens is not None:
            assert proc.stdout is not None
            if proc.stdout.readline().strip() != b"ready":
                raise RuntimeError(f"{name} did not get ready")
            token_list = json.loads(tokens.read_text())
        else:
            wait_port(port, proc, seconds=300)
            token_list = ["bench-token"]
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
        for i in range(WARM_CALLS):
            _post(conn, token_list[i % len(token_list)])
        subprocess.run(
            ["callgrind_control", "-i", "on", str(proc.pid)], check=True, capture_output=True
        )
        for i in range(calls):
            _post(conn, token_list[i % len(token_list)])
        subprocess.run(
            ["callgrind_control", "-i", "off", str(proc.pid)], check=True, capture_output=True
        )
        subprocess.run(["callgrind_control", "-d", str(proc.pid)], check=True, capture_output=True)
        conn.close()
    finally:
        stop(proc)
    return _total(out) / calls / 1e6


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
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=200, help="counted calls per case")
    p.add_argument("--base", help="also measure the bridge at this git revision")
    args = p.parse_args()
    fleet = ["--homes", "4", "--agents", "2"]
    results: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as t, contextlib.ExitStack() as stack:
        tmp = Path(t)
        cases: list[tuple[str, Path, list[str], bool]] = [
            ("sdk-trio", ROOT, [str(BENCH / "sdk_server.py"), "--stack", "trio"], False),
            ("bridge", ROOT, [str(BENCH / "bridge_server.py"), *fleet], True),
        ]
        if args.base:
            base = stack.enter_context(checkout(args.base))
            cases.append(
                (f"bridge@{args.base}", base, [str(base / "bench/bridge_server.py"), *fleet], True)
            )
        for name, root, argv, bridged in cases:
            tokens = tmp / f"{name}.tokens" if bridged else None
            started = time.monotonic()
            results[name] = measure(name.replace("/", "_"), argv, root, tokens, args.calls, tmp)
            print(
                f"{name:24} {results[name]:7.3f} M instructions per call "
                f"({args.calls} calls, {time.monotonic() - started:.0f} s)",
                flush=True,
            )
    for name, value in results.items():
        if name != "sdk-trio":
            print(f"{name} / sdk-trio: {value / results['sdk-trio']:.2f}x")
    day = dt.date.today().isoformat()
    out = BENCH / "results" / f"{day}-instructions.json"
    out.write_text(
        json.dumps({"calls": args.calls, "mega_instructions_per_call": results}, indent=2) + "\n"
    )
    print(f"wrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    sys.exit(main())
