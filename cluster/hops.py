"""How many of a cluster's calls take the hop between instances (docs/operations.md, "Calls at
the holder"): calls through HAProxy, and the instances' own count of the requests they
forwarded (`ftwbridge_mcp_requests_total{outcome="forwarded"}` on each `/metrics`, the entry's
audit outcome of a request another instance answered).

`hop_share` is what `bench/cluster_affinity.py` prints and the cluster tests bound: after a
warm-up of a few calls per home (HAProxy learns where each home is from the answers), a number
of calls per home, every home at once, each home's on one kept-alive connection as an
assistant makes them; the share is the forwards counted over the calls made.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx2
import trio
from prometheus_client.parser import text_string_to_metric_families

if TYPE_CHECKING:
    from .rig import Cluster

CALL_S = 30.0
"""Bound on one call through HAProxy, seconds (a loaded 2-core machine)."""
META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
}
TOOL = "homes_list"
"""The call made: a tool that reads nothing at the box, so the homes' pacing never answers
in place of the bridge; where a call goes is decided before its tool is looked at."""


@dataclass(frozen=True, slots=True)
class HopShare:
    """`calls` made through HAProxy (all answered 200), of which `hops` were forwarded by the
    instance they entered; `instances` and `homes` of the cluster."""

    calls: int
    hops: int
    instances: int
    homes: int

    @property
    def share(self) -> float:
        """The fraction of calls that took a hop, 0 to 1."""
        return self.hops / self.calls if self.calls else 0.0

    def line(self, affinity: str) -> str:
        """The figure in one line (what `make bench` prints)."""
        return (
            f"calls that took a hop under make cluster's balancer ({affinity}):"
            f" {100 * self.share:.1f} % ({self.hops} of {self.calls} calls,"
            f" {self.instances} instances, {self.homes} homes, steady state)"
        )


async def forwarded(cluster: Cluster) -> int:
    """The requests forwarded to another instance so far, all running instances together
    (each one's `/metrics`; a stopped one counts none)."""
    total = 0.0
    async with httpx2.AsyncClient(timeout=CALL_S) as http:
        for made in cluster.instances:
            if made.child is None or made.child.proc.returncode is not None:
                continue
            text = (await http.get(f"http://127.0.0.1:{made.admin_port}/metrics")).text
            for family in text_string_to_metric_families(text):
                for s in family.samples:
                    if s.name == "ftwbridge_mcp_requests_total":
                        total += s.value if s.labels.get("outcome") == "forwarded" else 0.0
    return round(total)


def call_body(n: int) -> tuple[bytes, dict[str, str]]:
    """The `n`th call's JSON-RPC body and headers (2026-07-28, `TOOL`)."""
    body: dict[str, Any] = {
        "jsonrpc": "2.0",
        "id": n,
        "method": "tools/call",
        "params": {"name": TOOL, "arguments": {}, "_meta": META},
    }
    headers = {
        "content-type": "application/json",
        "accept": "application/json, text/event-stream",
        "mcp-protocol-version": "2026-07-28",
        "mcp-method": "tools/call",
        "mcp-name": TOOL,
    }
    return json.dumps(body).encode(), headers


async def calls(cluster: Cluster, token: str, count: int) -> None:
    """`count` calls with `token` through HAProxy, one after another on one connection.

    Raises:
        RuntimeError: a call was not answered 200 (its status and body).
    """
    async with httpx2.AsyncClient(timeout=CALL_S) as http:
        for n in range(count):
            body, headers = call_body(n)
            headers["authorization"] = f"Bearer {token}"
            resp = await http.post(cluster.url, content=body, headers=headers)
            if resp.status_code != 200 or b'"isError":true' in resp.content:
                raise RuntimeError(f"call {n}: {resp.status_code} {resp.text[:200]}")


async def every_home(cluster: Cluster, count: int) -> None:
    """`count` calls for each home, every home at once."""
    async with trio.open_nursery() as nursery:
        for home in cluster.homes:
            nursery.start_soon(calls, cluster, home.token, count)


async def hop_share(cluster: Cluster, *, warm: int = 3, measured: int = 20) -> HopShare:
    """The share of calls that take a hop in steady state: `warm` calls per home first (not
    counted), then `measured` per home, counted (module docstring).

    Raises:
        RuntimeError: a call was not answered 200.
    """
    await every_home(cluster, warm)
    before = await forwarded(cluster)
    await every_home(cluster, measured)
    hops = await forwarded(cluster) - before
    running = sum(1 for i in cluster.instances if i.child is not None)
    return HopShare(measured * len(cluster.homes), hops, running, len(cluster.homes))
