"""Sessions per process: the bridge's RSS with 0, 1,000 and 10,000 warm sessions, and how many
sessions per second it opens through the door (Noise handshake to `hello_ok`), and the bridge
process's CPU time per open (ms), which shows whether the bridge or the box side sets the rate.

The bridge runs in this process; 625 stub homes run in one stub process (`--fleet`), each
granting 16 agents (the contract's sessions per home). Prints one JSON line at the end.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bridge_server import start, warm  # type: ignore[import-not-found]

STEPS = (1_000, 10_000)
AGENTS = 16


def rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


async def main() -> None:
    homes = -(-STEPS[-1] // AGENTS)
    with tempfile.TemporaryDirectory() as tmp:
        async with trio.open_nursery() as nursery:
            bridge, granted = await start(
                nursery,
                port=0,
                homes=homes,
                agents=AGENTS,
                stub_cpu=1,
                state=Path(tmp),
                extra={"warm_sessions": 20_000},
            )
            rss = {"0": rss_kib()}
            per: dict[str, float] = {}
            opened, seconds, cpu = 0, 0.0, 0.0
            for step in STEPS:
                cpu0 = time.process_time()
                took = await warm(bridge, granted[opened:step])
                cpu += time.process_time() - cpu0
                seconds += took
                opened = step
                assert bridge.pool.statistics().sessions == step, bridge.pool.statistics()
                rss[str(step)] = rss_kib()
                per[str(step)] = (rss[str(step)] - rss["0"]) / step
            print(
                json.dumps(
                    {
                        "rss_kib": rss,
                        "kib_per_session": per,
                        "opens_per_s": opened / seconds,
                        "bridge_cpu_ms_per_open": 1000 * cpu / opened,
                    }
                )
            )
            nursery.cancel_scope.cancel()


if __name__ == "__main__":
    argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    ).parse_args()
    trio.run(main)
