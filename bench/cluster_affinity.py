"""The share of calls that take the hop between instances under `make cluster`'s balancer
(docs/operations.md, "Calls at the holder"), in steady state, and with `--after-kill` in the
minute after the instance holding a home is killed.

    .venv/bin/python bench/cluster_affinity.py [--affinity learned|hash|none|all]
        [--instances 3] [--homes 6] [--calls 20] [--after-kill]

`cluster.rig.open_cluster` starts the cluster as `make cluster` does (PostgreSQL, the keys
services, the instances, HAProxy with the `backend bridges` of `--affinity`, stub homes whose
boxes dial through HAProxy, each home's assistant signed in by OAuth through HAProxy), then
`cluster.hops.hop_share` makes a few warm-up calls per home and `--calls` more per home, every
home at once, and counts the calls the instances forwarded (`/metrics`). Affinity modes:

- `learned` (`make cluster`'s): HAProxy sends a tagged token's call to the instance the
  answers named as the home's holder (`cluster/affinity.py`);
- `hash`: consistent hashing on the token's home tag (the uplinks still land by fewest
  connections: a box's upgrade request names no home);
- `none`: round robin, as before tags.

With `--after-kill`, each mode's cluster then goes on (`cluster.failover.after_kill`): `kill -9`
of the instance holding the first home, which stays down, and every home's assistant calling
through HAProxy for 60 s, a call every half second or so; the calls, the hops and the calls
answered in words (the moved homes are offline until their boxes redial) are counted per window
of 10 s, with when the moved homes were held by survivors again and when the last hop came.

Prints one line per mode (`HopShare.line`; with `--after-kill` the windows' lines follow), then
the results as JSON (what `bench/run.py` reads:
`measure` is the function to call). The figure counts calls, not time, so load does not move
it; it is never asserted in the tests beyond the 5 % bound of tests/cluster/test_affinity.py.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

import trio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cluster.affinity import MODES  # noqa: E402
from cluster.failover import Failover, after_kill  # noqa: E402
from cluster.hops import HopShare, hop_share  # noqa: E402
from cluster.rig import Options, open_cluster  # noqa: E402


async def measure(
    affinity: str = "learned",
    *,
    instances: int = 3,
    homes: int = 6,
    calls: int = 20,
    kill: bool = False,
) -> tuple[HopShare, Failover | None]:
    """Start a cluster whose HAProxy routes calls by `affinity` (`cluster.affinity.MODES`)
    and return its steady-state hop share (`cluster.hops.hop_share`), then (with `kill`) the
    minute after a holder is killed on the same cluster (`cluster.failover.after_kill`;
    None without).

    Raises:
        CannotStart: a part of the cluster could not start (PostgreSQL or HAProxy missing).
    """
    options = Options(port=0, instances=instances, homes=homes, affinity=affinity)
    async with open_cluster(options) as cluster:
        steady = await hop_share(cluster, measured=calls)
        return steady, (await after_kill(cluster) if kill else None)


async def main(
    modes: list[str], instances: int, homes: int, calls: int, kill: bool
) -> dict[str, Any]:
    """Measure each mode on a cluster of its own; print its lines; return them all."""
    out: dict[str, Any] = {}
    for mode in modes:
        got, failover = await measure(
            mode, instances=instances, homes=homes, calls=calls, kill=kill
        )
        print(got.line(mode), flush=True)
        out[mode] = asdict(got) | {"share": round(got.share, 4)}
        if failover is not None:
            for line in failover.lines():
                print(line, flush=True)
            windows = [asdict(w) | {"share": round(w.share, 4)} for w in failover.windows]
            out[mode]["after_kill"] = asdict(failover) | {"windows": windows}
    return out


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--affinity", choices=[*MODES, "all"], default="learned")
    p.add_argument("--instances", type=int, default=3)
    p.add_argument("--homes", type=int, default=6)
    p.add_argument("--calls", type=int, default=20, help="calls per home, measured")
    p.add_argument(
        "--after-kill",
        action="store_true",
        help="then kill the holder of the first home and count the hops for 60 s after",
    )
    args = p.parse_args()
    modes = list(MODES) if args.affinity == "all" else [args.affinity]
    out = trio.run(main, modes, args.instances, args.homes, args.calls, args.after_kill)
    print(json.dumps(out))
