"""Instructions the cluster hop adds to a call, under callgrind (docs/performance.md, "The cluster
hop"): a figure load cannot move.

    .venv/bin/python bench/hop_instructions.py [--calls 100] [--base REV]

`cluster.rig.open_cluster` starts PostgreSQL, the keys part and two instances, b1 (the entry)
and b2 (the holder), each under valgrind's callgrind with counting off, and stub homes whose
boxes dial b2 alone, so b2 holds every home. After warm-up calls, counting is turned on in
both instances for `--calls` sequential `tools/call status` (2026-07-28) on one keep-alive
connection, first straight to b2 (`direct`), then to b1, which forwards each to b2 (`hop`).
Also reads b1's `ftwbridge_mesh_holder_lookups_total` over the hop's calls: the database
lookups of a holder per forwarded call.
Prints millions of instructions per call at each instance and in all, and what the hop adds
(`hop` at b1 + b2, less `direct` at b2). What the instances do meanwhile with no call (lease
renewals, timers) is counted for `IDLE_S` before and after, and taken off in proportion; it
leaves about 0.3 M of noise per figure. PostgreSQL's own work is not counted (another
process): the forward's database lookups show only as the instance's side of the query.

With `--base REV` it measures that git revision too (checked out in a temporary worktree, run
with this checkout's virtualenv and this script). Writes `bench/results/<date>-hop.json`.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import trio

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(ROOT))

from bridge_server import UNLIMITED  # type: ignore[import-not-found]  # noqa: E402
from callgrind import dump_total  # type: ignore[import-not-found]  # noqa: E402
from run import MODERN_BODY, MODERN_HEADERS  # type: ignore[import-not-found]  # noqa: E402

import cluster.procs  # noqa: E402
import cluster.rig  # noqa: E402
from cluster.rig import Options, open_cluster  # noqa: E402

HEADERS = dict(line.split(": ", 1) for line in MODERN_HEADERS.strip().splitlines())
WARM_CALLS = 40
IDLE_S = 30.0
"""How long the instances' work with no calls (lease renewals, timers: about 10 M instructions
a second each under callgrind) is counted, s, once before the calls and once after: their
mean rate is taken off each case in proportion to the case's duration."""
INSTANCES = ("b1", "b2")


def _under_callgrind(out: Path) -> None:
    """Start every instance under callgrind, counting off, its output in `out`/<cpu>.out.
    The rig's `pin(cpu)` prefix is the one hook it offers for an instance's command: here the
    "cpu" of b1 is 0 and of b2 is 1, which name their output files."""

    def prefix(cpu: int | None) -> list[str]:
        if cpu is None:
            return []
        return [
            "valgrind",
            "--tool=callgrind",
            "--instr-atstart=no",
            f"--callgrind-out-file={out / f'b{cpu + 1}.out'}",
        ]

    cluster.rig.pin = prefix  # type: ignore[attr-defined]
    cluster.procs.WAIT_S = 600.0  # an instance starts 20-50 times slower under valgrind


def _totals(out: Path, name: str) -> int:
    """The instructions of `name`'s newest dump."""
    newest = max(out.glob(f"{name}.out.*"), key=lambda f: int(f.name.rsplit(".", 1)[1]))
    return int(dump_total(newest))


async def _control(pids: dict[str, int], *args: str) -> None:
    for pid in pids.values():
        await trio.run_process(
            ["callgrind_control", *args, str(pid)], capture_stdout=True, capture_stderr=True
        )


async def _lookups(c: Any) -> float | None:
    """b1's database lookups of a holder so far (`ftwbridge_mesh_holder_lookups_total`;
    None at a revision that has no such counter: it looked the holder up on every call)."""
    url = f"http://127.0.0.1:{c.instance('b1').admin_port}/metrics"
    async with httpx2.AsyncClient(timeout=300) as http:
        text = (await http.get(url)).text
    for row in text.splitlines():
        if row.startswith("ftwbridge_mesh_holder_lookups_total "):
            return float(row.split()[1])
    return None


async def _calls(http: httpx2.AsyncClient, url: str, tokens: list[str], n: int) -> None:
    for i in range(n):
        headers = HEADERS | {"authorization": f"Bearer {tokens[i % len(tokens)]}"}
        r = await http.post(url, headers=headers, json=MODERN_BODY)
        if r.status_code != 200 or b'"isError":true' in r.content:
            raise RuntimeError(f"call failed: {r.status_code} {r.content[:200]!r}")


async def measure(calls: int, out: Path) -> dict[str, float]:
    """Millions of instructions per call at b1 and b2, direct and through the hop."""
    _under_callgrind(out)
    options = Options(
        port=0,
        instances=2,
        homes=2,
        settings=dict(UNLIMITED) | {"log_level": "warning"},
        cpus={"b1": 0, "b2": 1},
        boxes_at="b2",
        stub_args=("--no-read-limit",),
    )
    figures: dict[str, float] = {}
    async with open_cluster(options) as c:
        held = {h.name: await c.holder(h.name) for h in c.homes}
        if set(held.values()) != {"b2"}:
            raise SystemExit(f"the homes are not all at b2: {held}")
        tokens = [h.token for h in c.homes]
        pids = {n: c.instance(n).child.pid for n in INSTANCES}  # type: ignore[union-attr]
        async with httpx2.AsyncClient(timeout=300) as http:
            cases = (("idle1", ""), ("direct", "b2"), ("hop", "b1"), ("idle2", ""))
            for case, entry in cases:
                url = c.instance(entry).url if entry else ""
                if url:
                    await _calls(http, url, tokens, WARM_CALLS)
                before = await _lookups(c)
                await _control(pids, "-z")
                await _control(pids, "-i", "on")
                started = trio.current_time()
                if url:
                    await _calls(http, url, tokens, calls)
                else:
                    await trio.sleep(IDLE_S)
                figures[f"{case}_s"] = trio.current_time() - started
                await _control(pids, "-i", "off")
                await _control(pids, "-d")
                for name in INSTANCES:
                    figures[f"{case}_{name}"] = _totals(out, name) / 1e6
                after = await _lookups(c)
                if case == "hop":
                    figures["hop_lookups"] = (
                        -1.0 if before is None or after is None else (after - before) / calls
                    )
    for case in ("direct", "hop"):  # less what each instance does meanwhile with no calls
        for name in INSTANCES:
            rate = (figures[f"idle1_{name}"] + figures[f"idle2_{name}"]) / (2 * IDLE_S)
            idle = rate * figures[f"{case}_s"]
            figures[f"{case}_{name}"] = (figures[f"{case}_{name}"] - idle) / calls
    figures["direct"] = figures["direct_b2"]  # b1 serves none of these: its share is noise
    figures["hop"] = figures["hop_b1"] + figures["hop_b2"]
    figures["added"] = figures["hop"] - figures["direct"]
    return {k: round(v, 3) for k, v in figures.items()}


@contextlib.contextmanager
def checkout(rev: str) -> Iterator[Path]:
    """A temporary git worktree of `rev` holding this script (and `callgrind.py`), removed
    afterwards."""
    with tempfile.TemporaryDirectory() as t:
        path = Path(t) / "base"
        subprocess.run(
            ["git", "worktree", "add", "-q", "--detach", str(path), rev], cwd=ROOT, check=True
        )
        try:
            for mine in (Path(__file__), BENCH / "callgrind.py"):  # this script and its reader
                (path / "bench" / mine.name).write_bytes(mine.read_bytes())
            yield path
        finally:
            subprocess.run(
                ["git", "worktree", "remove", "--force", str(path)], cwd=ROOT, check=False
            )


def line(name: str, f: dict[str, float]) -> str:
    """One result as a line of text."""
    lookups = "1 (no counter)" if f["hop_lookups"] < 0 else f"{f['hop_lookups']:.2f}"
    return (
        f"{name:16} direct {f['direct']:6.3f} M (b2 {f['direct_b2']:.3f})   hop {f['hop']:6.3f} M"
        f" (b1 {f['hop_b1']:.3f} + b2 {f['hop_b2']:.3f})   the hop adds {f['added']:6.3f} M;"
        f" holder lookups in the database per forwarded call: {lookups}"
    )


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--calls", type=int, default=100, help="counted calls per case (100)")
    p.add_argument("--base", help="also measure the bridge at this git revision")
    p.add_argument("--json", action="store_true", help="print only the result as JSON")
    args = p.parse_args()
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as t:
        results["bridge"] = trio.run(measure, args.calls, Path(os.environ.get("HOP_OUT", t)))
    if not args.json:
        print(line("bridge", results["bridge"]), flush=True)
    if args.base:
        with checkout(args.base) as base:
            script = base / "bench" / Path(__file__).name
            done = subprocess.run(
                [sys.executable, str(script), "--calls", str(args.calls), "--json"],
                cwd=base,
                check=True,
                capture_output=True,
                text=True,
            )
            results[f"bridge@{args.base}"] = json.loads(done.stdout.splitlines()[-1])["bridge"]
        if not args.json:
            print(line(f"@{args.base}", results[f"bridge@{args.base}"]))
    if args.json:
        print(json.dumps(results))
        return
    out = BENCH / "results" / f"{dt.date.today().isoformat()}-hop.json"
    out.write_text(json.dumps({"calls": args.calls, "mega_instructions": results}, indent=2) + "\n")
    print(f"wrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
