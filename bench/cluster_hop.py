"""The forwarding hop's cost (docs/operations.md, "The forwarding hop's cost"): two instances on one PostgreSQL, one CPU each.

    .venv/bin/python bench/cluster_hop.py [--homes 4]

`cluster.rig.open_cluster` starts PostgreSQL, the keys part, instance b1 (the entry) pinned to
CPU 0 and b2 (the holder) to CPU 1, with every limit lifted as in the bridge case, and stub
homes on CPU 1 whose boxes dial b2 alone, so b2 holds every home. wrk (on CPU 1, as in
`bench/run.py`) sends `tools/call status` (2026-07-28) with the homes' tokens in turn:

- `cluster-direct`: to b2, which holds the home: one instance serves the call, as in one
  process (the single-instance figure, on PostgreSQL);
- `cluster-hop`: to b1, which looks the home up in the directory and forwards the request
  whole, signed, to b2's internal listener.

Rounds alternate the two cases at 1 and 16 connections, `BENCH_SECONDS` each (`bench/run.py`'s
settings); each figure is the median of the rounds, and the hop's added p50/p99 is the median
of the per-round differences. CPU per call is the instances' own (user + system, from
`/proc`), b1 and b2 apart and together. The last line printed is the result as JSON (what
`bench/run.py` reads); speed figures live here, never in the tests.

`--busy-cpus` keeps both CPUs from going idle during the rounds: a busy loop at the lowest
priority (`SCHED_IDLE`) on each, which runs only when nothing else would. At one connection
the two instances of the hop take turns, so each one's CPU idles while the other works, and
direct calls never idle CPU 1 (wrk, b2 and the stub homes hand over to each other there); the
difference between a run with and without it is what waking an idle CPU costs the instances
(docs/performance.md, "Where the entry's CPU goes").
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import trio

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(ROOT))

from bridge_server import UNLIMITED  # type: ignore[import-not-found]  # noqa: E402
from run import (  # type: ignore[import-not-found]  # noqa: E402
    MODERN_BODY,
    MODERN_HEADERS,
    ROUNDS,
    SECONDS,
    cpu_seconds,
    files_for,
    pin,
)

from cluster.rig import Cluster, Options, open_cluster  # noqa: E402

CONNECTIONS = (1, 16)


async def wrk(url: str, conns: int, seconds: int, files: dict[str, str]) -> dict[str, Any]:
    """One wrk run (on CPU 1) against `url`; its WRKJSON figures."""
    argv = [*pin(1), "wrk", "-t1", f"-c{conns}", f"-d{seconds}s", "--timeout", "30s"]
    argv += ["-s", str(BENCH / "wrk.lua"), url]
    done = await trio.run_process(
        argv, capture_stdout=True, env=os.environ | files, cwd=BENCH, check=True
    )
    line = next(x for x in done.stdout.decode().splitlines() if x.startswith("WRKJSON "))
    figures: dict[str, Any] = json.loads(line.removeprefix("WRKJSON "))
    return figures


async def sample(cluster: Cluster, case: str, conns: int, files: dict[str, str]) -> dict[str, Any]:
    """One measurement of `case` at `conns` connections."""
    entry, holder = cluster.instance("b1"), cluster.instance("b2")
    url = (entry if case == "cluster-hop" else holder).url
    pids = {name: cluster.instance(name).child.pid for name in ("b1", "b2")}  # type: ignore[union-attr]
    before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    r = await wrk(url, conns, SECONDS, files)
    calls = max(1, r["requests"])
    cpu = {name: 1000 * (cpu_seconds(pid) - before[name]) / calls for name, pid in pids.items()}
    assert entry is not holder
    return {
        "rps": r["requests"] / (r["duration_us"] / 1e6),
        "p50_ms": r["p50_us"] / 1000,
        "p99_ms": r["p99_us"] / 1000,
        "cpu_b1_ms": cpu["b1"],
        "cpu_b2_ms": cpu["b2"],
        "cpu_ms_per_call": cpu["b1"] + cpu["b2"],
        "requests": r["requests"],
        "bad": r["non2xx"] + r["errors"] + r["socket_errors"],
    }


def summarise(samples: dict[tuple[str, int], list[dict[str, Any]]]) -> dict[str, Any]:
    """Medians per case and connections, and the hop's added figures."""
    rows = []
    for (case, conns), got in samples.items():
        row: dict[str, Any] = {"case": case, "connections": conns, "rounds": len(got)}
        for key in ("rps", "p50_ms", "p99_ms", "cpu_b1_ms", "cpu_b2_ms", "cpu_ms_per_call"):
            row[key] = round(statistics.median(g[key] for g in got), 3)
        row["requests"] = sum(g["requests"] for g in got)
        row["bad"] = sum(g["bad"] for g in got)
        rows.append(row)
    added = []
    for conns in CONNECTIONS:
        hop, direct = samples[("cluster-hop", conns)], samples[("cluster-direct", conns)]
        pairs = list(zip(hop, direct, strict=True))
        added.append(
            {
                "connections": conns,
                **{
                    f"added_{k}": round(statistics.median(h[k] - d[k] for h, d in pairs), 3)
                    for k in ("p50_ms", "p99_ms", "cpu_ms_per_call")
                },
            }
        )
    return {"cases": rows, "hop": added}


def pair_options(homes: int) -> Options:
    """The two instances this bench measures: b1 the entry on CPU 0, b2 holding all `homes`
    (their stub boxes beside it on CPU 1), limits off."""
    return Options(
        port=0,
        instances=2,
        homes=homes,
        settings=dict(UNLIMITED),
        cpus={"b1": 0, "b2": 1, "homes": 1},
        boxes_at="b2",
        stub_args=("--no-read-limit",),
    )


def busy_loops() -> list[subprocess.Popen[bytes]]:
    """A busy loop at `SCHED_IDLE` priority pinned to each of CPUs 0 and 1 (`--busy-cpus`)."""
    loop = [sys.executable, "-c", "while True: pass"]
    return [subprocess.Popen(["chrt", "--idle", "0", *pin(cpu), *loop]) for cpu in (0, 1)]


async def main(homes: int, busy_cpus: bool = False) -> dict[str, Any]:
    """Start the two instances, measure both cases in interleaved rounds (with the CPUs kept
    busy at the lowest priority when `busy_cpus`); returns the result."""
    async with open_cluster(pair_options(homes)) as cluster:
        held = {h.name: await cluster.holder(h.name) for h in cluster.homes}
        if set(held.values()) != {"b2"}:
            raise SystemExit(f"the homes are not all at b2: {held}")
        with tempfile.TemporaryDirectory() as tmp:
            files = files_for(
                Path(tmp), "cluster", MODERN_BODY, MODERN_HEADERS, [h.token for h in cluster.homes]
            )
            for case in ("cluster-direct", "cluster-hop"):
                await sample(cluster, case, 16, files)  # warm-up: sessions, pools, caches
            loops = busy_loops() if busy_cpus else []
            try:
                samples = await rounds(cluster, files)
            finally:
                for proc in loops:
                    proc.kill()
                    proc.wait()
    return summarise(samples)


async def rounds(
    cluster: Cluster, files: dict[str, str]
) -> dict[tuple[str, int], list[dict[str, Any]]]:
    """`ROUNDS` interleaved rounds of both cases at each of `CONNECTIONS`."""
    samples: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for rnd in range(ROUNDS):
        order = ("cluster-direct", "cluster-hop")[:: 1 if rnd % 2 == 0 else -1]
        for conns in CONNECTIONS:
            for case in order:
                got = await sample(cluster, case, conns, files)
                samples.setdefault((case, conns), []).append(got)
                print(
                    f"  round {rnd + 1} {case:15} c={conns:<3} {got['rps']:7.1f} req/s"
                    f"  p50 {got['p50_ms']:6.2f} ms  p99 {got['p99_ms']:6.2f} ms"
                    f"  CPU b1 {got['cpu_b1_ms']:.2f} + b2 {got['cpu_b2_ms']:.2f} ms/call"
                    f"  bad {got['bad']}",
                    file=sys.stderr,
                    flush=True,
                )
    return samples


def table(result: dict[str, Any]) -> str:
    """The result as Markdown."""
    out = [
        "| case | conns | req/s | p50 ms | p99 ms | CPU ms/call (b1 + b2) | bad |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in result["cases"]:
        out.append(
            f"| {r['case']} | {r['connections']} | {r['rps']:.0f} | {r['p50_ms']:.2f}"
            f" | {r['p99_ms']:.2f} | {r['cpu_ms_per_call']:.2f} ({r['cpu_b1_ms']:.2f} +"
            f" {r['cpu_b2_ms']:.2f}) | {r['bad']} |"
        )
    out += ["", "| conns | hop adds p50 ms | hop adds p99 ms | hop adds CPU ms/call |"]
    out.append("|---|---|---|---|")
    for h in result["hop"]:
        out.append(
            f"| {h['connections']} | {h['added_p50_ms']:.2f} | {h['added_p99_ms']:.2f}"
            f" | {h['added_cpu_ms_per_call']:.2f} |"
        )
    return "\n".join(out)


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--homes", type=int, default=4)
    p.add_argument("--busy-cpus", action="store_true", help="keep both CPUs from idling")
    args = p.parse_args()
    result = trio.run(main, args.homes, args.busy_cpus)
    print(table(result), file=sys.stderr)
    print(json.dumps(result))
