"""`python -m cluster [--once] [--port N] [--instances N] [--homes N]` (`make cluster`).

Starts the cluster (`cluster.rig.open_cluster`; the scripted assistant signs in at each home
for real through HAProxy: registration, /authorize, the consent form with the home's claim
code, the owner's approval, the token exchange, each step at whichever instance HAProxy
picks), prints where each part runs and which instance holds each home, reads the OAuth metadata through HAProxy, runs the demo's scripted assistant
session through HAProxy in both MCP eras for the first home and a `status` call for every
other, then (without `--once`) prints the URL and tokens and serves until Ctrl-C or SIGTERM,
when it stops every process it started, in order. A second Ctrl-C stops them all at once. A part that cannot start ends the run with one
sentence on stderr and exit status 2; a scripted session that fails, with status 1.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time

import trio

from devtools.sessions import assistant_session

from .procs import CannotStart
from .rig import Cluster, Options, open_cluster

HOLDER_S = 10.0
"""Bound on finding a home's holder in the directory once its agent is granted, seconds."""


async def _status(url: str, token: str, mode: str) -> str:
    """One `status` call with the official `mcp` client; returns its first 100 characters."""
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    headers = {"Authorization": f"Bearer {token}"}
    http = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0))
    async with http, Client(streamable_http_client(url, http_client=http), mode=mode) as client:
        result = await client.call_tool("status", {})
    text = str(result.structured_content if not result.is_error else result.content[0])
    return text[:100]


async def describe(cluster: Cluster) -> None:
    """Print where each part runs and who holds each home."""
    for line in cluster.migrated:
        print(f"ftwbridge db migrate: {line}")
    print(f"cluster in {cluster.root}:")
    print(f"  PostgreSQL     {cluster.postgres.url}")
    reach = cluster.instances[0].settings
    where = reach.get("keys_url") or f"unix:{reach.get('keys_socket')}"
    print(f"  keys services  {where}")
    for made in cluster.instances:
        print(f"  instance {made.name:5} {made.url} (admin 127.0.0.1:{made.admin_port})")
    print(f"  HAProxy        {cluster.base} (/mcp, OAuth, /v1/box)")
    for home in cluster.homes:
        held = None
        with trio.move_on_after(HOLDER_S):  # the claim is written as the uplink authenticates
            held = await cluster.wait_holder(home.name, lambda h: h is not None)
        print(
            f"  {home.name:14} console 127.0.0.1:{home.console}, uplink at {held or '?'};"
            f" the assistant signed in through HAProxy in {home.sign_in_s:.1f} s"
        )


async def oauth_metadata(cluster: Cluster) -> str:
    """The authorization server's metadata through HAProxy, in one line."""
    import httpx2

    async with httpx2.AsyncClient(timeout=30) as http:
        r = await http.get(cluster.base + "/.well-known/oauth-authorization-server")
    r.raise_for_status()
    data = r.json()
    return (
        f"OAuth metadata through HAProxy: issuer {data['issuer']}, token {data['token_endpoint']}"
    )


async def session(cluster: Cluster) -> list[str]:
    """The demo's scripted session through HAProxy; returns its printed lines."""
    first, *others = cluster.homes
    lines = [await oauth_metadata(cluster)]
    lines.append(f"{first.name}, the demo's scripted session through HAProxy:")
    lines += await assistant_session(cluster.url, "2026-07-28", token=first.token)
    lines += await assistant_session(cluster.url, "legacy", token=first.token)
    for home in others:
        for mode in ("2026-07-28", "legacy"):
            lines.append(
                f"{home.name} [{mode}] status: {await _status(cluster.url, home.token, mode)}"
            )
    return lines


async def run(options: Options, *, once: bool) -> int:
    """The whole run (module docstring); returns the exit status."""
    started = time.monotonic()
    failed: list[str] = []
    async with trio.open_nursery() as nursery:
        serving = trio.Event()
        stop = trio.Event()

        async def watch() -> None:
            with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                async for _ in signals:
                    if serving.is_set() and not stop.is_set():
                        print("stopping the cluster...", flush=True)
                        stop.set()
                    else:
                        nursery.cancel_scope.cancel()

        async def main() -> None:
            print(
                f"cluster: starting PostgreSQL, {options.instances} instances, the keys"
                f" service, HAProxy and {options.homes} stub homes",
                flush=True,
            )
            async with open_cluster(options) as cluster:
                await describe(cluster)
                try:
                    lines = await session(cluster)
                except Exception as exc:  # the person reads what failed, the cluster stops
                    failed.append(f"the scripted session failed: {type(exc).__name__}: {exc}")
                    return
                for text in lines:
                    print(text, flush=True)
                print(f"cluster session done in {time.monotonic() - started:.1f} s", flush=True)
                if not once:
                    print("\nConnect an MCP client (Streamable HTTP) through HAProxy:")
                    print(f"  URL:    {cluster.url}")
                    for home in cluster.homes:
                        print(f"  {home.name}: Authorization: Bearer {home.token}")
                    print(f"  logs and configs: {cluster.root}")
                    print("Ctrl-C stops the cluster.", flush=True)
                    serving.set()
                    await stop.wait()
            nursery.cancel_scope.cancel()

        nursery.start_soon(watch)
        nursery.start_soon(main)
    if failed:
        print(f"cluster: {failed[0]}", file=sys.stderr)
        return 1
    return 0


def _cannot_start(exc: BaseException) -> CannotStart | None:
    """The `CannotStart` that `exc` is or holds (with nothing but cancellations beside it)."""
    if isinstance(exc, CannotStart):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        found = [f for e in exc.exceptions if (f := _cannot_start(e)) is not None]
        rest = [
            e
            for e in exc.exceptions
            if _cannot_start(e) is None and not isinstance(e, trio.Cancelled)
        ]
        if found and not rest:
            return found[0]
    return None


def main(argv: list[str] | None = None) -> None:
    """Entry point of `python -m cluster`."""
    p = argparse.ArgumentParser(
        prog="python -m cluster",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--once", action="store_true", help="stop after the scripted session")
    p.add_argument(
        "--port",
        type=int,
        default=None,
        help="HAProxy's port on 127.0.0.1 (default 8790, a free one with --once)",
    )
    p.add_argument("--instances", type=int, default=3, help="bridge instances (default 3)")
    p.add_argument("--homes", type=int, default=3, help="stub homes (default 3)")
    args = p.parse_args(argv)
    port = args.port if args.port is not None else (0 if args.once else 8790)
    options = Options(port=port, instances=args.instances, homes=args.homes)
    try:
        status = trio.run(lambda: run(options, once=args.once))
    except BaseException as exc:
        found = _cannot_start(exc)
        if found is None:
            raise
        hint = ' (make cluster CLUSTER_ARGS="--port N" picks another)' if found.port_taken else ""
        print(f"cluster: {found}{hint}", file=sys.stderr)
        status = 2
    sys.exit(status)


if __name__ == "__main__":
    main()
