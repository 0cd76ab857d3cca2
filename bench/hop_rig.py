"""Hold `bench/cluster_hop.py`'s two-instance cluster open for measuring by hand.

    .venv/bin/python bench/hop_rig.py OUT.json [--homes 4]

Starts the cluster exactly as `bench/cluster_hop.py` does (b1 on CPU 0, b2 and the stub homes
on CPU 1, every box at b2), writes the instances' PIDs and URLs and wrk's files to OUT.json,
then waits until it is interrupted (SIGINT/SIGTERM), when it closes the cluster. For strace,
py-spy and /proc readings of one instance while wrk runs against the other.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import tempfile
from pathlib import Path

import trio

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent))
sys.path.insert(0, str(BENCH))

from cluster_hop import pair_options  # type: ignore[import-not-found]  # noqa: E402
from run import MODERN_BODY, MODERN_HEADERS, files_for  # type: ignore[import-not-found]  # noqa: E402

from cluster.rig import open_cluster  # noqa: E402


async def main(out: Path, homes: int) -> None:
    """Open the cluster, write `out`, wait for a signal."""
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with open_cluster(pair_options(homes)) as cluster:
            held = {h.name: await cluster.holder(h.name) for h in cluster.homes}
            with tempfile.TemporaryDirectory() as tmp:
                files = files_for(
                    Path(tmp), "rig", MODERN_BODY, MODERN_HEADERS, [h.token for h in cluster.homes]
                )
                facts = {
                    "held": held,
                    "files": files,
                    **{
                        name: {
                            "pid": cluster.instance(name).child.pid,  # type: ignore[union-attr]
                            "url": cluster.instance(name).url,
                        }
                        for name in ("b1", "b2")
                    },
                }
                await trio.Path(out).write_text(json.dumps(facts, indent=1))
                print("ready", file=sys.stderr, flush=True)
                async for _ in signals:
                    break


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("out", type=Path)
    p.add_argument("--homes", type=int, default=4)
    a = p.parse_args()
    trio.run(main, a.out, a.homes)
