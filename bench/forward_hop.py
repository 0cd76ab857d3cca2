"""What forwarding adds to a call (docs/operations.md, "The forwarding hop's cost"): the cluster of `tests/cluster`
(three instances on a throwaway PostgreSQL, a stub home held by b-1), then the same request
sent one at a time N times straight to the holder and N times to b-2, which forwards it.

    .venv/bin/python bench/forward_hop.py [N]

Prints p50 / p99 in ms of each and their difference, for `tools/list` (no box read) and a
`status` call (one box read). Limits are raised for the run so no request waits for pacing.
A loaded machine moves these figures; compare runs made side by side.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx2

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.cluster.conftest import running_cluster
from tests.store.pgserver import postgres_bin, running_postgres

BODIES = {
    "tools/list": b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}',
    "status": b'{"jsonrpc":"2.0","id":2,"method":"tools/call",'
    b'"params":{"name":"status","arguments":{}}}',
}
LIMITS = {
    "FTWBRIDGE_HTTP_BURST": "100000",
    "FTWBRIDGE_HTTP_PER_S": "100000",
    "FTWBRIDGE_PACE_CALLS_BURST": "100000",
    "FTWBRIDGE_PACE_CALLS_PER_S": "100000",
    "FTWBRIDGE_LOG_LEVEL": "warning",
}


def _ms(samples: list[float], q: float) -> float:
    return statistics.quantiles(samples, n=100, method="inclusive")[int(q) - 1] * 1000


def main(n: int) -> None:
    bindir = postgres_bin()
    if bindir is None:
        raise SystemExit("PostgreSQL is not installed (make postgres)")
    with (
        tempfile.TemporaryDirectory() as tmp,
        running_postgres(bindir) as pg,
        running_cluster(pg, Path(tmp), LIMITS) as cluster,
    ):
        token = cluster.tokens["a1"]
        headers = {
            "authorization": f"Bearer {token}",
            "content-type": "application/json",
            "accept": "application/json",
            "mcp-protocol-version": "2025-11-25",
        }
        with httpx2.Client(timeout=30) as http:
            for what, body in BODIES.items():
                figures = {}
                for where in ("b-1", "b-2"):
                    url = cluster.instances[where].mcp
                    for _ in range(20):  # warm: connections, sessions, caches
                        http.post(url, headers=headers, content=body).raise_for_status()
                    samples = []
                    for _ in range(n):
                        t0 = time.perf_counter()
                        http.post(url, headers=headers, content=body).raise_for_status()
                        samples.append(time.perf_counter() - t0)
                    figures[where] = (_ms(samples, 50), _ms(samples, 99))
                (d50, d99), (f50, f99) = figures["b-1"], figures["b-2"]
                print(
                    f"{what:10}  direct p50 {d50:6.2f} p99 {d99:6.2f} ms   forwarded p50"
                    f" {f50:6.2f} p99 {f99:6.2f} ms   added p50 {f50 - d50:+6.2f}"
                    f" p99 {f99 - d99:+6.2f} ms"
                )


if __name__ == "__main__":
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("n", nargs="?", type=int, default=300, help="requests each way (300)")
    main(p.parse_args().n)
