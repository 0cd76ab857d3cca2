"""How long each of trio's run-loop batches lasts in the bridge under concurrent load.

trio runs the tasks that are ready in batches: after each `epoll_wait` every runnable task gets
one step (to its next checkpoint), and a task woken meanwhile waits for the next batch, so a
call's latency is the sum of the batches it waits through. Fewer turns per call (`bench/
turns.py`) mean longer steps; whether that makes batches lumpier, and a call woken by the
door's reader wait longer behind them, is what this measures. Each tree runs a bridge as `make
bench` does (32 stub homes, 4 agents each, warmed; the bridge on CPU 0, the homes and wrk on
CPU 1), with a trio instrument timing every batch (`after_io_wait` to the next
`before_io_wait`, with the task steps it ran) while wrk drives `status` calls at
`--connections`. Trees are measured in interleaved rounds (A B A B, the order rotating), since
batch durations are CPU time and move with whatever else the machine runs: the load average is
printed with each row.

Prints, per tree and round: the batches that ran a task, their wall time and their CPU time
(the bridge thread's, which other processes on the machine move less) p50 / p99 / max in ms,
steps per batch (mean, p99), the share of wall time spent in batches, each step's wait from
its task's wake-up (p50 / p99 / max), the time Python's collector took (it runs inside some
batch), and wrk's rate and p50 / p99 latency; then each tree's medians over the rounds.

    python bench/batches.py [--tree NAME=REV_OR_DIR ...] [--rounds 4] [--seconds 5]
                            [--connections 64] [--json]

A `--tree` given as a directory runs the code in it as it is (edits not committed included);
otherwise it is a git revision checked out in a temporary worktree. Every tree runs with this
checkout's virtualenv. With no `--tree`, this checkout alone.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import trio
from run import (  # type: ignore[import-not-found]
    MODERN_BODY,
    MODERN_HEADERS,
    PY,
    ROOT,
    cpu_seconds,
    files_for,
    pin,
    stop,
    wrk,
)


def _pct(values: list[float], q: float) -> float:
    """The `q` quantile (0-1) of sorted `values`."""
    return values[min(len(values) - 1, int(len(values) * q))]


class Batches(trio.abc.Instrument):
    """While `on`: each run-loop batch's wall and CPU time (s) and task steps, and each task
    step's wait from the task's wake-up (`task_scheduled`) to the step (s)."""

    def __init__(self) -> None:
        self.on = False
        self.reset()
        self.on = False
        self._start: float | None = None
        self._cpu = 0.0
        self._n = 0
        self._woken: dict[trio.lowlevel.Task, float] = {}

    def collecting(self, phase: str, info: dict[str, int]) -> None:
        """A `gc.callbacks` hook: the collector's time while `on` (total and longest, s)."""
        if phase == "start":
            self._gc = time.perf_counter()
        elif self.on:
            took = time.perf_counter() - self._gc
            self.gc_s += took
            self.gc_max_s = max(self.gc_max_s, took)

    def reset(self) -> None:
        self.gc_s = self.gc_max_s = self._gc = 0.0
        self.wall: list[float] = []
        self.cpu: list[float] = []
        self.steps: list[float] = []
        self.waits: list[float] = []
        self._since = time.perf_counter()
        self.on = True

    def after_io_wait(self, timeout: float) -> None:
        if self.on:
            self._start, self._cpu, self._n = time.perf_counter(), time.thread_time(), 0

    def task_scheduled(self, task: trio.lowlevel.Task) -> None:
        if self.on:
            self._woken[task] = time.perf_counter()

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self._n += 1
        woken = self._woken.pop(task, None)
        if woken is not None and self.on:
            self.waits.append(time.perf_counter() - woken)

    def before_io_wait(self, timeout: float) -> None:
        if self._start is not None and self._n:
            self.wall.append(time.perf_counter() - self._start)
            self.cpu.append(time.thread_time() - self._cpu)
            self.steps.append(self._n)
        self._start = None

    def summary(self) -> dict[str, Any]:
        """The figures since `reset`: durations in ms, `busy` a share of the wall time."""
        self.on = False
        self._woken.clear()
        elapsed = time.perf_counter() - self._since
        wall, cpu, steps, waits = (sorted(x) for x in (self.wall, self.cpu, self.steps, self.waits))
        if not wall or not waits:
            return {"batches": 0}
        return {
            "batches": len(wall),
            "p50_ms": 1000 * _pct(wall, 0.5),
            "p99_ms": 1000 * _pct(wall, 0.99),
            "max_ms": 1000 * wall[-1],
            "cpu_p50_ms": 1000 * _pct(cpu, 0.5),
            "cpu_p99_ms": 1000 * _pct(cpu, 0.99),
            "cpu_max_ms": 1000 * cpu[-1],
            "steps_mean": sum(steps) / len(steps),
            "steps_p99": _pct(steps, 0.99),
            "wait_p50_ms": 1000 * _pct(waits, 0.5),
            "wait_p99_ms": 1000 * _pct(waits, 0.99),
            "wait_max_ms": 1000 * waits[-1],
            "busy": sum(wall) / elapsed,
            "gc_ms": 1000 * self.gc_s,
            "gc_max_ms": 1000 * self.gc_max_s,
        }


async def serve(tree: Path, tokens: Path, port_file: Path) -> None:
    """The bridge from `tree`'s code in this process, the instrument on between the lines
    `on` and `off` on stdin (each answered on stdout: `on`, then the figures as JSON)."""
    sys.path[:0] = [str(tree), str(tree / "bench")]
    from bridge_server import start, warm  # type: ignore[import-not-found]

    with tempfile.TemporaryDirectory() as tmp:
        async with trio.open_nursery() as nursery:
            bridge, granted = await start(
                nursery, port=0, homes=32, agents=4, stub_cpu=1, state=Path(tmp)
            )
            await warm(bridge, granted)
            keys = [await bridge.issue_token(h, k, a, ("ftw.live.read",)) for h, k, a in granted]
            await trio.Path(tokens).write_text(json.dumps(keys))
            port = int(bridge.site.resource.rsplit(":", 1)[1].split("/", 1)[0])
            await trio.Path(port_file).write_text(str(port))
            batches = Batches()
            trio.lowlevel.add_instrument(batches)
            gc.callbacks.append(batches.collecting)
            print("ready", flush=True)
            stdin = trio.lowlevel.FdStream(os.dup(0))
            buf = b""
            while chunk := await stdin.receive_some():
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    if line == b"on":
                        batches.reset()
                        print("on", flush=True)
                    elif line == b"off":
                        print(json.dumps(batches.summary()), flush=True)
            nursery.cancel_scope.cancel()


@contextlib.contextmanager
def tree_of(spec: str, tmp: Path, name: str) -> Iterator[Path]:
    """A directory as it is, or a revision checked out in a temporary worktree."""
    if Path(spec).is_dir():
        yield Path(spec).resolve()
        return
    path = tmp / f"tree-{name}"
    subprocess.run(
        ["git", "worktree", "add", "-q", "--detach", str(path), spec], cwd=ROOT, check=True
    )
    try:
        yield path
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(path)], cwd=ROOT, check=False)


class Server:
    """One tree's bridge, started as `serve` on CPU 0 and stopped when the run ends."""

    def __init__(self, stack: contextlib.ExitStack, name: str, tree: Path, tmp: Path) -> None:
        self.name = name
        tokens, port_file = tmp / f"{name}.tokens", tmp / f"{name}.port"
        argv = [*pin(0), PY, __file__, "--serve", str(tree), str(tokens), str(port_file)]
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=ROOT)
        stack.callback(stop, self.proc)
        while (line := self._line()) != "ready":  # whatever the bridge prints before it
            if not line and self.proc.poll() is not None:
                raise RuntimeError(f"the bridge of {name} did not get ready")
        self.url = f"http://127.0.0.1:{port_file.read_text()}/mcp"
        self.files = files_for(tmp, name, MODERN_BODY, MODERN_HEADERS, None, tokens)

    def _line(self) -> str:
        assert self.proc.stdout is not None
        return self.proc.stdout.readline().decode().strip()

    def tell(self, word: str) -> str:
        stdin: IO[bytes] | None = self.proc.stdin
        assert stdin is not None
        stdin.write(word.encode() + b"\n")
        stdin.flush()
        return self._line()


def measure(server: Server, connections: int, seconds: int) -> dict[str, Any]:
    """One round of one tree: its batches while wrk runs, and wrk's own figures."""
    load = os.getloadavg()[0]
    if server.tell("on") != "on":
        raise RuntimeError(f"{server.name} did not start counting")
    cpu = cpu_seconds(server.proc.pid)
    r = wrk(server.url, connections, seconds, server.files)
    cpu = cpu_seconds(server.proc.pid) - cpu
    row: dict[str, Any] = {"tree": server.name, "load": load} | json.loads(server.tell("off"))
    row |= {
        "rps": r["requests"] / (r["duration_us"] / 1e6),
        "wrk_p50_ms": r["p50_us"] / 1000,
        "wrk_p99_ms": r["p99_us"] / 1000,
        "cpu_ms_per_call": 1000 * cpu / max(1, r["requests"]),
        "bad": r["non2xx"] + r["errors"] + r["socket_errors"],
    }
    return row


def show(row: dict[str, Any], label: str) -> None:
    print(
        f"  {label:9} {row['tree']:6} load {row['load']:4.2f}  batches {row['batches']:6.0f}"
        f"  wall p50 {row['p50_ms']:5.2f} p99 {row['p99_ms']:6.2f} max {row['max_ms']:6.1f}"
        f"  cpu p50 {row['cpu_p50_ms']:5.2f} p99 {row['cpu_p99_ms']:6.2f} max {row['cpu_max_ms']:6.1f}"
        f"  steps {row['steps_mean']:4.1f} (p99 {row['steps_p99']:3.0f})  busy {row['busy']:4.2f}\n"
        f"  {'':9} {'':6} wake-to-step p50 {row['wait_p50_ms']:5.2f} p99 {row['wait_p99_ms']:6.2f}"
        f" max {row['wait_max_ms']:6.1f} ms  collector {row['gc_ms']:5.0f} ms (max {row['gc_max_ms']:5.1f})"
        f"  |  wrk {row['rps']:6.0f} req/s"
        f"  p50 {row['wrk_p50_ms']:6.1f}  p99 {row['wrk_p99_ms']:6.1f} ms"
        f"  cpu {row['cpu_ms_per_call']:.2f} ms/call  bad {row['bad']:.0f}",
        flush=True,
    )


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    specs = [t.split("=", 1) for t in args.tree] or [["here", str(ROOT)]]
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as t, contextlib.ExitStack() as stack:
        tmp = Path(t)
        servers = []
        for name, spec in specs:
            tree = stack.enter_context(tree_of(spec, tmp, name))
            servers.append(Server(stack, name, tree, tmp))
        for s in servers:
            wrk(s.url, 16, 2, s.files)  # warm-up
        for i in range(args.rounds):
            for s in servers[i % len(servers) :] + servers[: i % len(servers)]:
                rows.append(measure(s, args.connections, args.seconds) | {"round": i + 1})
                show(rows[-1], f"round {i + 1}")
    print(f"medians over {args.rounds} rounds, {args.connections} connections:")
    for name, _ in specs:
        mine = [r for r in rows if r["tree"] == name]
        show(
            {k: statistics.median(r[k] for r in mine) for k in mine[0] if k != "tree"}
            | {"tree": name},
            "median",
        )
    return rows


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tree", action="append", default=[], metavar="NAME=REV_OR_DIR")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--seconds", type=int, default=5)
    p.add_argument("--connections", type=int, default=64)
    p.add_argument("--json", action="store_true", help="print every row as JSON last")
    p.add_argument(
        "--serve", nargs=3, metavar=("TREE", "TOKENS", "PORT_FILE"), help=argparse.SUPPRESS
    )
    a = p.parse_args()
    if a.serve:
        trio.run(serve, Path(a.serve[0]), Path(a.serve[1]), Path(a.serve[2]))
    else:
        result = run(a)
        if a.json:
            print(json.dumps(result))
