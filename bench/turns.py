"""Scheduler turns per warm bridged call: a count no load on the machine can move.

Every `await` that gives up the CPU costs a turn of trio's run loop (an `epoll_wait` and the
task switch); a chain of them in one call is paid in sequence. This starts the bridge in this
process (bridged for real to stub homes in another process, as `bench/bridge_server.py`),
warms every session, then sends `--calls` sequential `status` calls on one keep-alive
connection from a thread (so the client's own work is not counted), with a trio instrument
counting the loop's turns (`before_io_wait`) and each task's steps. Prints turns and task
steps per call, and where the bridge's tasks waited most often (the innermost frames).

    python bench/turns.py [--calls 300]
"""

from __future__ import annotations

import argparse
import collections
import http.client
import json
import sys
import tempfile
import threading
from pathlib import Path
from types import FrameType
from typing import Any

import trio

sys.path.append(str(Path(__file__).resolve().parent))
from bridge_server import start, warm  # type: ignore[import-not-found]
from run import MODERN_BODY, MODERN_HEADERS  # type: ignore[import-not-found]

ROOT = str(Path(__file__).resolve().parents[1]) + "/"
HEADERS = dict(line.split(": ", 1) for line in MODERN_HEADERS.strip().splitlines())


def _where(task: trio.lowlevel.Task) -> str:
    """The two innermost frames (file:line) outside trio of a suspended task, outermost first
    (a connection task shows only its top: hypercorn awaits it through a wrapper)."""
    coro: Any = task.coro
    frames: list[str] = []
    while coro is not None:
        frame: FrameType | None = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
        if frame is not None:
            name = frame.f_code.co_filename.rsplit("site-packages/", 1)[-1]
            if not name.startswith("trio/_core/") or not frames:
                frames.append(f"{name.removeprefix(ROOT)}:{frame.f_lineno}")
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
    return " <- ".join(reversed(frames[-2:]))


class Turns(trio.abc.Instrument):
    """Counts the run loop's turns and each task's steps while `on`."""

    def __init__(self) -> None:
        self.on = False
        self.turns = 0
        self.steps: collections.Counter[str] = collections.Counter()
        self.waits: collections.Counter[str] = collections.Counter()

    def before_io_wait(self, timeout: float) -> None:
        self.turns += self.on

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if self.on:
            self.steps[task.name.rsplit(".", 1)[-1]] += 1

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        if self.on:
            self.waits[_where(task)] += 1


def _client(port: int, tokens: list[str], calls: int, turns: Turns) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    body = json.dumps(MODERN_BODY)

    def post(i: int) -> None:
        conn.request("POST", "/mcp", body, HEADERS | {"Authorization": f"Bearer {tokens[i]}"})
        resp = conn.getresponse()
        data = resp.read()
        if resp.status != 200 or b'"isError":true' in data:
            raise RuntimeError(f"call failed: {resp.status} {data[:200]!r}")

    for i in range(20):
        post(i % len(tokens))
    turns.on = True
    for i in range(calls):
        post(i % len(tokens))
    turns.on = False
    conn.close()


async def main(calls: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        async with trio.open_nursery() as nursery:
            bridge, granted = await start(
                nursery, port=0, homes=4, agents=2, stub_cpu=None, state=Path(tmp)
            )
            await warm(bridge, granted)
            tokens = [await bridge.issue_token(h, k, a, ("ftw.live.read",)) for h, k, a in granted]
            port = int(bridge.site.resource.rsplit(":", 1)[1].split("/", 1)[0])
            turns = Turns()
            trio.lowlevel.add_instrument(turns)
            errors: list[BaseException] = []

            def client() -> None:
                try:
                    _client(port, tokens, calls, turns)
                except BaseException as exc:  # reported below, from the trio side
                    errors.append(exc)

            thread = threading.Thread(target=client)
            thread.start()
            await trio.to_thread.run_sync(thread.join)
            trio.lowlevel.remove_instrument(turns)
            if errors:
                raise errors[0]
            print(f"{turns.turns / calls:.2f} scheduler turns per call ({calls} calls)")
            print(f"{sum(turns.steps.values()) / calls:.2f} task steps per call:")
            for name, n in turns.steps.most_common(6):
                print(f"  {n / calls:6.2f}  {name}")
            print("where the bridge's tasks gave up the CPU, per call:")
            for where, n in turns.waits.most_common(12):
                print(f"  {n / calls:6.2f}  {where}")
            nursery.cancel_scope.cancel()


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=300)
    trio.run(main, p.parse_args().calls)
