"""What one session open costs the bridge: CPU ms per open and opens per second.

An open is `pool.call(home, key, Read.LIVE_GET)` on an agent with no session yet: the keys part
(in-process) writes Noise IK message 1, the door carries it to a stub home in another process
(pinned to CPU 1; the bridge to CPU 0), message 2 comes back, then `hello` / `hello_ok`, then
the live read. `--homes` stub homes grant 16 agents each; after `--warmup` opens, `--rounds`
rounds of `--per-round` opens are measured, 64 at a time. The bridge's CPU is this process's
`time.process_time`, which other load on the machine moves far less than wall time.

    python bench/opens.py [--rounds 5] [--per-round 300] [--profile FILE] [--py-spy FILE]
    python bench/opens.py --instructions [--per-round 300] [--keep DIR]

Prints each round, then one JSON line with the medians (and every round). `--profile` runs
cProfile over the measured rounds and writes its stats to FILE, with the calls per open of the
functions called most printed (a coroutine counts once per resumption). `--py-spy` samples this
process with py-spy (`pip install py-spy`) over the measured rounds only, and writes its
collapsed stacks (`-f raw`) to FILE. `--instructions` runs the bridge under valgrind's callgrind
with counting off, turns it on (`callgrind_control`) for one round of `--per-round` opens only,
and prints the bridge's instructions per open: a figure the machine's other load cannot move
(the stub home, in its own process, is not counted); `--keep DIR` copies callgrind's files
there for `callgrind_annotate --inclusive=yes`. The homes dial the door's own listener
(`door_bind`), the only one that serves `/v1/box`.
"""

from __future__ import annotations

import sys
from pathlib import Path

BENCH = str(Path(__file__).resolve().parent)
if sys.path and sys.path[0] == BENCH:  # bench/profile.py would shadow the stdlib's `profile`
    del sys.path[0]

import argparse  # noqa: E402
import cProfile  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import pstats  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import trio  # noqa: E402

sys.path.append(BENCH)
from bridge_server import start, warm  # type: ignore[import-not-found]  # noqa: E402
from callgrind import total  # type: ignore[import-not-found]  # noqa: E402

AGENTS = 16


async def main(args: argparse.Namespace) -> None:
    total = args.warmup + args.rounds * args.per_round
    homes = -(-total // AGENTS)
    cpu_ms: list[float] = []
    rate: list[float] = []
    prof = cProfile.Profile() if args.profile else None
    with tempfile.TemporaryDirectory() as tmp:
        async with trio.open_nursery() as nursery:
            bridge, granted = await start(
                nursery,
                port=0,
                homes=homes,
                agents=AGENTS,
                stub_cpu=1,
                state=Path(tmp),
                extra={"warm_sessions": total + 100}
                | ({"handshake_s": 120.0} if args.gate else {}),  # callgrind is ~50x slower
            )
            await warm(bridge, granted[: args.warmup])
            spy = None
            if args.py_spy:
                argv = ["py-spy", "record", "--pid", str(os.getpid()), "--rate", "1000"]
                argv += ["--nonblocking", "--format", "raw", "--output", args.py_spy]
                spy = subprocess.Popen(argv, stdout=subprocess.DEVNULL)  # noqa: ASYNC220
                await trio.sleep(1)  # py-spy attaches
            at = args.warmup
            if args.gate:  # under callgrind: the parent counts between our two lines
                print("ready", flush=True)
                await trio.wrap_file(sys.stdin).readline()
            for r in range(args.rounds):
                batch = granted[at : at + args.per_round]
                at += len(batch)
                c0 = time.process_time()
                if prof is not None:
                    prof.enable()
                took = await warm(bridge, batch)
                if prof is not None:
                    prof.disable()
                cpu_ms.append(1000 * (time.process_time() - c0) / len(batch))
                rate.append(len(batch) / took)
                print(f"round {r + 1}: {cpu_ms[-1]:.3f} ms CPU per open, {rate[-1]:.0f} opens/s")
            if args.gate:
                print("done", flush=True)
                await trio.wrap_file(sys.stdin).readline()
            if spy is not None:
                spy.send_signal(signal.SIGINT)
                await trio.to_thread.run_sync(spy.wait)
            assert bridge.pool.statistics().sessions == at, bridge.pool.statistics()
            nursery.cancel_scope.cancel()
    if prof is not None:
        prof.dump_stats(args.profile)
        opens = args.rounds * args.per_round
        stats = pstats.Stats(args.profile)
        rows = sorted(stats.stats.items(), key=lambda kv: -kv[1][1])  # type: ignore[attr-defined]
        print(f"calls per open (of {opens}), most called:")
        for (file, line, name), (_cc, nc, tt, _ct, _callers) in rows[: args.top]:
            where = f"{Path(file).name}:{line}" if line else file
            print(f"  {nc / opens:7.2f}  {1e6 * tt / opens:7.1f} us own  {name}  {where}")
    print(
        json.dumps(
            {
                "bridge_cpu_ms_per_open": round(statistics.median(cpu_ms), 3),
                "opens_per_s": round(statistics.median(rate)),
                "rounds_cpu_ms": [round(x, 3) for x in cpu_ms],
                "rounds_opens_per_s": [round(x) for x in rate],
            }
        )
    )


def instructions(per_round: int, keep: str = "") -> None:
    """Run this bench under callgrind, counting one round of `per_round` opens only; print the
    instructions per open. `keep`: a directory to copy callgrind's output files into."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "callgrind.out"
        argv = ["valgrind", "--tool=callgrind", "--instr-atstart=no"]
        argv += [f"--callgrind-out-file={out}", sys.executable, __file__, "--gate"]
        argv += ["--rounds", "1", "--per-round", str(per_round), "--warmup", "100"]
        log = (Path(tmp) / "stderr").open("wb")
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log)
        assert proc.stdin is not None and proc.stdout is not None
        pid = str(proc.pid)
        for word, switch in (("ready", "on"), ("done", "off")):
            while (line := proc.stdout.readline().decode()).strip() != word:
                if not line:
                    tail = (Path(tmp) / "stderr").read_text(errors="replace")[-3000:]
                    raise RuntimeError(f"the bench under callgrind exited before {word!r}:\n{tail}")
            subprocess.run(
                ["callgrind_control", "-i", switch, pid], check=True, capture_output=True
            )
            proc.stdin.write(b"\n")
            proc.stdin.flush()
        subprocess.run(["callgrind_control", "-d", pid], check=True, capture_output=True)
        proc.stdin.close()
        proc.wait(timeout=120)
        counted = total(out)
        if keep:
            Path(keep).mkdir(parents=True, exist_ok=True)
            for f in out.parent.glob(out.name + "*"):
                shutil.copy(f, Path(keep) / f.name)
    print(json.dumps({"bridge_minstr_per_open": round(counted / per_round / 1e6, 3)}))


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--per-round", type=int, default=300)
    p.add_argument("--warmup", type=int, default=200)
    p.add_argument("--profile", default="")
    p.add_argument("--top", type=int, default=40)
    p.add_argument("--py-spy", default="")
    p.add_argument("--instructions", action="store_true")
    p.add_argument("--keep", default="", help="with --instructions: keep callgrind's files here")
    p.add_argument("--gate", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.instructions:
        instructions(args.per_round, args.keep)
        sys.exit(0)
    if hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) > 1:
        os.sched_setaffinity(0, {0})  # the stub home is started pinned to CPU 1
    trio.run(main, args)
