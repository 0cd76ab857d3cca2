"""The kernel's share of a warm call: user and system CPU, and syscalls by name, per call.

    .venv/bin/python bench/syscalls.py [--base REV] [--only NAME] [--rounds N] [--seconds S]

callgrind (`bench/instructions.py`) counts user-space instructions only; a server's time in
the kernel (its sends, reads, epoll waits, clock reads) is not in it. This starts each server
as `bench/instructions.py` defines them (the bridge bridged for real to 4 stub homes in
another process, which is not counted; sdk-trio, sdk-uvicorn; with `--base REV` the bridge at
that revision, from a temporary worktree, run with this checkout's virtualenv), the server on
CPU 0 and wrk and the stub homes on CPU 1 as `make bench` does, and then:

- **CPU**: `--rounds` interleaved rounds (the cases in a rotating order, as `bench/run.py`'s)
  of wrk at 1 and 16 connections for `--seconds` each; the server's user and system time
  (`/proc/PID/stat` utime and stime, every thread's, in clock ticks of 10 ms) over the
  window, divided by the calls wrk made. Each figure is the median of its rounds. These move
  with the machine's load: the 1-minute load average is recorded beside them;
  the event loop's (the main thread's) voluntary context switches per call (a wait that
  slept: the CPU's caches go to whatever runs meanwhile) and involuntary ones (preempted)
  are counted beside them;
- **syscalls**: one window of wrk at each connection count with `strace -c -f -p PID`
  attached to the server (all its threads); the count of each syscall divided by the calls
  made meanwhile. strace stops the server at every syscall, so the rate under it is a
  fraction of the real one, but the count of syscalls a call makes does not depend on how
  fast it goes. What the server does with no calls in the window (timers, the homes' pings)
  is counted too; at a few hundred calls a second it is small (`--idle-s` counts it alone).

`--cache-sim N` instead runs each server under callgrind's cache and branch simulation
(`bench/instructions.py`'s measure, N sequential calls on one connection, with
`--cache-sim=yes --branch-sim=yes`) and prints per call the instructions, the simulated
first-level and last-level cache misses and the mispredicted branches: what makes one
instruction cost more time in one server than in another, which no load moves either.

Prints one table per measure; writes `bench/results/<date>-syscalls.json` (not with `--only`;\n`kernel` or `cache_sim` in it, the other kept).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as dt
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import instructions  # type: ignore[import-not-found]
from instructions import Server, checkout, servers
from run import (  # type: ignore[import-not-found]
    BENCH,
    MODERN_BODY,
    MODERN_HEADERS,
    files_for,
    free_port,
    pin,
    stop,
    wait_port,
    wrk,
)

TICK_S = 1 / os.sysconf("SC_CLK_TCK")
Running = tuple[str, int, str, dict[str, str]]
"""(case name, server pid, URL, wrk's files) of one started server."""


def cpu_split(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of process `pid` so far, every thread's (`/proc/PID/stat`
    fields 14 and 15, utime and stime, in clock ticks)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) * TICK_S, int(fields[12]) * TICK_S


def switches(pid: int) -> tuple[int, int]:
    """(voluntary, involuntary) context switches so far of process `pid`'s main thread, where
    its event loop runs (`/proc/PID/status`): a voluntary one is a wait that slept. Worker
    threads (a thread pool's) are left out: they come and go, and their counts with them."""
    vol = invol = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("voluntary_ctxt_switches:"):
            vol = int(line.split()[1])
        elif line.startswith("nonvoluntary_ctxt_switches:"):
            invol = int(line.split()[1])
    return vol, invol


def start(stack: contextlib.ExitStack, server: Server, tmp: Path) -> Running:
    """Start `server` on CPU 0 (a bridged one with its stub homes on CPU 1), stopped when
    `stack` closes; returns it once it serves."""
    port = free_port()
    name = server.name.replace("/", "_").replace("@", "_")
    argv = [*pin(0), *server.argv(port)]
    tokens = tmp / f"{name}.tokens"
    if server.bridged:
        argv += ["--tokens", str(tokens), "--stub-cpu", "1"]
    proc = subprocess.Popen(
        argv,
        cwd=server.root,
        env=os.environ | {"PYTHONPATH": str(server.root)},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE if server.bridged else None,
    )
    stack.callback(stop, proc)
    if server.bridged:
        assert proc.stdout is not None
        if proc.stdout.readline().strip() != b"ready":
            raise RuntimeError(f"{server.name} did not get ready")
        files = files_for(tmp, name, MODERN_BODY, MODERN_HEADERS, None, tokens)
    else:
        wait_port(port, proc)
        files = files_for(tmp, name, MODERN_BODY, MODERN_HEADERS, ["bench-token"])
    return server.name, proc.pid, f"http://127.0.0.1:{port}/mcp", files


def cpu_round(case: Running, conns: int, seconds: int) -> dict[str, Any]:
    """One window of wrk at `conns` connections: the server's CPU ms per call."""
    name, pid, url, files = case
    user0, sys0 = cpu_split(pid)
    vol0, invol0 = switches(pid)
    r = wrk(url, conns, seconds, files)
    user1, sys1 = cpu_split(pid)
    vol1, invol1 = switches(pid)
    calls = max(1, r["requests"])
    return {
        "case": name,
        "connections": conns,
        "calls": r["requests"],
        "bad": r["non2xx"] + r["errors"] + r["socket_errors"],
        "rps": round(r["requests"] / (r["duration_us"] / 1e6), 1),
        "user_ms": 1000 * (user1 - user0) / calls,
        "system_ms": 1000 * (sys1 - sys0) / calls,
        "sleeps": (vol1 - vol0) / calls,
        "preempted": (invol1 - invol0) / calls,
    }


def parse_strace(text: str) -> dict[str, int]:
    """The calls column of `strace -c`'s summary table, by syscall name (its total left out).

    The table's rows are `% time, seconds, usecs/call, calls, [errors,] syscall`."""
    counts: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 5 or not parts[0].replace(".", "").isdigit() or parts[-1] == "total":
            continue
        counts[parts[-1]] = counts.get(parts[-1], 0) + int(parts[3])
    return counts


def traced(case: Running, conns: int, seconds: int, tmp: Path) -> dict[str, Any]:
    """Syscalls per call of the server at `conns` connections: `strace -c -f -p PID` over one
    window of wrk (`seconds`); with `conns` 0, the window has no calls (per second instead)."""
    name, pid, url, files = case
    out = tmp / f"strace-{pid}-{conns}.txt"
    strace = subprocess.Popen(
        ["strace", "-c", "-f", "-o", str(out), "-p", str(pid)],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert strace.stderr is not None
        line = strace.stderr.readline()  # "strace: Process N attached" once it is attached
        if "attached" not in line:
            raise RuntimeError(f"strace did not attach to {name}: {line.strip()}")
        time.sleep(0.5)  # the other threads' attach lines
        if conns:
            r = wrk(url, conns, seconds, files)
            per = max(1, r["requests"])
        else:
            time.sleep(seconds)
            r, per = {"requests": 0}, seconds
    finally:
        strace.send_signal(signal.SIGINT)
        strace.wait(30)
    counts = parse_strace(out.read_text())
    by_name = {k: round(v / per, 2) for k, v in sorted(counts.items(), key=lambda kv: -kv[1])}
    return {
        "case": name,
        "connections": conns,
        "calls": r["requests"],
        "total": round(sum(counts.values()) / per, 2),
        "by_name": {k: v for k, v in by_name.items() if v >= 0.01},
    }


def cpu_table(rows: list[dict[str, Any]]) -> str:
    out = [
        "| case | conns | req/s | user ms/call | system ms/call | user+system | sleeps/call"
        " | preempted/call |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        total = r["user_ms"] + r["system_ms"]
        out.append(
            f"| {r['case']} | {r['connections']} | {r['rps']:.0f} | {r['user_ms']:.3f} |"
            f" {r['system_ms']:.3f} | {total:.3f} | {r['sleeps']:.2f} | {r['preempted']:.2f} |"
        )
    return "\n".join(out)


def syscall_table(rows: list[dict[str, Any]], top: int = 12) -> str:
    names: dict[str, float] = {}
    for r in rows:
        for k, v in r["by_name"].items():
            names[k] = max(names.get(k, 0.0), v)
    cols = sorted(names, key=lambda k: -names[k])[:top]
    out = ["| case | conns | total | " + " | ".join(cols) + " |", "|---" * (len(cols) + 3) + "|"]
    for r in rows:
        cells = " | ".join(f"{r['by_name'].get(k, 0):.2f}" for k in cols)
        out.append(f"| {r['case']} | {r['connections']} | {r['total']:.2f} | {cells} |")
    return "\n".join(out)


def medians(samples: dict[tuple[str, int], list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Each (case, connections)'s median round."""
    rows = []
    for (name, conns), got in samples.items():
        rows.append(
            {
                "case": name,
                "connections": conns,
                "rounds": len(got),
                "calls": sum(g["calls"] for g in got),
                "bad": sum(g["bad"] for g in got),
                **{
                    k: round(statistics.median(g[k] for g in got), 4)
                    for k in ("rps", "user_ms", "system_ms", "sleeps", "preempted")
                },
            }
        )
    return rows


def paired(
    samples: dict[tuple[str, int], list[dict[str, Any]]], case: str, against: str
) -> dict[int, dict[str, Any]]:
    """By connections: the median and range over rounds of `case`'s user+system CPU per call
    over `against`'s in the same round (interleaved: the same load on both)."""
    out = {}
    for (name, conns), got in samples.items():
        base = samples.get((against, conns))
        if name != case or not base:
            continue
        ratios = sorted(
            (g["user_ms"] + g["system_ms"]) / (b["user_ms"] + b["system_ms"])
            for g, b in zip(got, base, strict=True)
            if b["user_ms"] + b["system_ms"]
        )
        if ratios:
            med = statistics.median(ratios)
            out[conns] = {
                "median": round(med, 3),
                "range": [round(ratios[0], 3), round(ratios[-1], 3)],
            }
    return out


def measure(args: argparse.Namespace, base: Path | None, tmp: Path) -> dict[str, Any]:
    conns = tuple(args.connections)
    with contextlib.ExitStack() as stack:
        cases = [
            start(stack, s, tmp)
            for s in servers(base, args.base)
            if s.name != "sdk-ts" and (not args.only or s.name in args.only)
        ]
        for _name, _pid, url, files in cases:
            wrk(url, 16, 2, files)  # warm-up
        load = os.getloadavg()
        print(f"load average at the start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}", flush=True)
        samples: dict[tuple[str, int], list[dict[str, Any]]] = {}
        for rnd in range(args.rounds):
            order = cases[rnd % len(cases) :] + cases[: rnd % len(cases)]
            for case in order:
                for c in conns:
                    row = cpu_round(case, c, args.seconds)
                    samples.setdefault((row["case"], c), []).append(row)
            print(f" CPU round {rnd + 1} of {args.rounds} done", flush=True)
        syscalls = []
        for case in cases:
            for c in ((0,) if args.idle_s else ()) + conns:
                syscalls.append(traced(case, c, args.idle_s if c == 0 else args.strace_s, tmp))
                print(f"  {case[0]} c={c}: {syscalls[-1]['total']:.1f} syscalls", flush=True)
        load_end = os.getloadavg()
    return {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "loadavg_start": [round(x, 2) for x in load],
        "loadavg_end": [round(x, 2) for x in load_end],
        "rounds": args.rounds,
        "seconds": args.seconds,
        "strace_seconds": args.strace_s,
        "cpu": medians(samples),
        "cpu_ratios": {
            f"{case}/{against}": paired(samples, case, against)
            for case, against in [
                ("bridge", "sdk-uvicorn"),
                ("bridge", "sdk-trio"),
                ("bridge", f"bridge@{args.base}"),
            ]
        },
        "cpu_samples": {f"{k[0]}@{k[1]}": v for k, v in samples.items()},
        "syscalls": syscalls,
    }


CACHE_EVENTS = ("Ir", "I1mr", "D1mr", "D1mw", "ILmr", "DLmr", "DLmw", "Bc", "Bcm", "Bi", "Bim")


def dump_events(tmp: Path, server: Server) -> dict[str, int]:
    """Every event of the newest callgrind dump `instructions.measure` left in `tmp` for
    `server` (its `events:` and `totals:` lines)."""
    name = server.name.replace("/", "_")
    dumps = [f for f in tmp.glob(f"callgrind.{name}.out.*") if f.suffix[1:].isdigit()]
    lines = max(dumps, key=lambda f: int(f.suffix[1:])).read_text(errors="replace").splitlines()
    events = next(x for x in lines if x.startswith("events:")).split()[1:]
    rows = [list(map(int, x.split()[1:])) for x in lines if x.startswith(("totals:", "summary:"))]
    return dict(zip(events, max(rows, key=lambda r: r[0]), strict=False))  # as `dump_total`


def cache_sim(args: argparse.Namespace, base: Path | None, tmp: Path) -> dict[str, Any]:
    """Per call under callgrind's cache and branch simulation (see the module)."""
    sim = ("--cache-sim=yes", "--branch-sim=yes")
    rows = []
    for server in servers(base, args.base):
        if server.name == "sdk-ts" or (args.only and server.name not in args.only):
            continue
        sized = dataclasses.replace(server, valgrind=(*server.valgrind, *sim))
        instructions.measure(sized, args.cache_sim, tmp)
        got = dump_events(tmp, sized)
        per = {k: round(got.get(k, 0) / args.cache_sim) for k in CACHE_EVENTS}
        rows.append({"case": server.name, **per})
        print(f"  {server.name}: {per}", flush=True)
    return {"calls": args.cache_sim, "per_call": rows}


def cache_table(rows: list[dict[str, Any]]) -> str:
    out = [
        "| case | k instructions | L1 misses (I / D) | LL misses | mispredicted branches |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        d1 = r["D1mr"] + r["D1mw"]
        ll = r["ILmr"] + r["DLmr"] + r["DLmw"]
        out.append(
            f"| {r['case']} | {r['Ir'] / 1000:,.0f} | {r['I1mr']:,} / {d1:,} | {ll:,} |"
            f" {r['Bcm'] + r['Bim']:,} |"
        )
    return "\n".join(out)


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--base", help="also measure the bridge at this git revision")
    p.add_argument("--only", action="append", help="measure this case alone (repeatable)")
    p.add_argument("--rounds", type=int, default=5, help="interleaved CPU rounds")
    p.add_argument("--seconds", type=int, default=3, help="seconds of one CPU window")
    p.add_argument("--strace-s", type=int, default=4, help="seconds of the strace window")
    p.add_argument("--idle-s", type=int, default=0, help="also strace each server idle this long")
    p.add_argument("--connections", type=int, nargs="+", default=[1, 16])
    p.add_argument("--cache-sim", type=int, help="callgrind's cache simulation, this many calls")
    p.add_argument("--out", type=Path, help="write the result here (default: the day's file)")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as t, contextlib.ExitStack() as stack:
        base = stack.enter_context(checkout(args.base)) if args.base else None
        if args.cache_sim:
            result = cache_sim(args, base, Path(t))
            print("\n" + cache_table(result["per_call"]))
        else:
            result = measure(args, base, Path(t))
            print("\n" + cpu_table(result["cpu"]) + "\n\n" + syscall_table(result["syscalls"]))
            for pair, by_conns in result["cpu_ratios"].items():
                for conns, r in by_conns.items():
                    print(f"{pair} CPU per call at {conns}: {r['median']} ({r['range']})")
    out = args.out
    if out is None and not args.only:
        out = BENCH / "results" / f"{dt.date.today().isoformat()}-syscalls.json"
    if out is not None:  # the other measure's figures in the file are kept
        kept = json.loads(out.read_text()) if out.exists() else {}
        kept["cache_sim" if args.cache_sim else "kernel"] = result
        out.write_text(json.dumps(kept, indent=1) + "\n")
        print(f"\nwritten {out}")


if __name__ == "__main__":
    sys.exit(main())
