"""What the hop's channel alone costs per request, under callgrind (docs/performance.md, "The
cluster hop"): a forward-sized request and answer between a client and a bare h11 holder in one
process, on loopback.

    .venv/bin/python bench/hop_channel.py [--requests 300] [--tls]

Each client (`hop`: `mesh/channel.HopClient`; `httpx2`: the `httpx2.AsyncClient` forwards used
before) runs twice under valgrind's callgrind, with no requests and with `--requests`, one at a
time on one keep-alive connection; the difference over the requests is the instructions of one
request and its answer, both ends together (the holder's side is the same bare h11 server in
every case, so the difference between clients is the clients'). `--tls` puts both on TLS with a
throwaway CA (`cluster/ca.py`), as `make cluster`'s hop is. `--holder edge` serves the holder
with hypercorn through `ftwbridge.edge` and a plain ASGI app, as the internal listener did
before it became lean; `--holder lean` serves it with the internal listener itself
(`mesh/listener.InternalListener`, its bounds and routing, a route that answers at once): the
difference with the bare h11 holder is what the listener's own work costs.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import h11
import trio
from callgrind import dump_total  # type: ignore[import-not-found]

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

BODY = b'{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"status","arguments":{}}}'
HEADERS = [
    ("content-type", "application/json"),
    ("accept", "application/json, text/event-stream"),
    ("mcp-protocol-version", "2026-07-28"),
    ("mcp-method", "tools/call"),
    ("mcp-name", "status"),
    ("ftw-budget-ms", "29000"),
    ("ftw-mesh-from", "b1"),
    ("ftw-mesh-to", "b2;3"),
    ("ftw-mesh-ts", "1790000000000"),
    ("ftw-mesh-nonce", "00" * 16),
    ("ftw-mesh-token", "11" * 32),
    ("ftw-mesh-signed", "accept,content-type,ftw-budget-ms,mcp-method,mcp-name"),
    ("ftw-mesh-sig", "22" * 32),
]
ANSWER = (
    b'{"jsonrpc":"2.0","id":2,"result":{"content":[{"type":"text","text":"' + b"x" * 500 + b'"}]}}'
)


async def _holder(stream: trio.abc.Stream) -> None:
    conn = h11.Connection(h11.SERVER)
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            data = await stream.receive_some(65536)
            if not data:
                return
            conn.receive_data(data)
        elif isinstance(event, h11.EndOfMessage):
            head = h11.Response(
                status_code=200,
                headers=[
                    ("content-type", "application/json"),
                    ("content-length", str(len(ANSWER))),
                ],
            )
            out = conn.send(head) or b""
            out += conn.send(h11.Data(data=ANSWER)) or b""
            out += conn.send(h11.EndOfMessage()) or b""
            await stream.send_all(out)
            conn.start_next_cycle()
        elif isinstance(event, h11.ConnectionClosed):
            return


async def _asgi(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """The holder as a plain ASGI app (as the internal listener's `/mcp` route was) for
    `--holder edge`: the body read, then the answer in one `http.response.body`."""
    if scope["type"] == "lifespan":
        while True:
            kind = (await receive())["type"].rsplit(".", 1)[1]  # startup, shutdown
            await send({"type": f"lifespan.{kind}.complete"})
            if kind == "shutdown":
                return
    while (await receive()).get("more_body"):
        pass
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(ANSWER))]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": ANSWER})


async def _edge_holder(nursery: trio.Nursery) -> str:
    from ftwbridge import edge

    config = edge.EdgeConfig()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = None
    urls: list[str] = await nursery.start(edge.serve, _asgi, config)
    return urls[0]


async def _lean_holder(nursery: trio.Nursery, tls: Any) -> str:
    import socket

    from ftwbridge.mcp.http import HttpResponse
    from ftwbridge.mesh.listener import InternalListener, InternalSettings, serve_internal

    async def route(request: Any, peer: str) -> HttpResponse:
        return HttpResponse(200, {"content-type": "application/json"}, ANSWER)

    settings = InternalSettings(max_body_bytes=1 << 20, body_s=30, idle_s=120, write_s=30)
    listener = InternalListener({"/mcp": route}, settings, tls=tls)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    port = sock.getsockname()[1]
    await nursery.start(serve_internal, listener, sock)
    return f"{'https' if tls else 'http'}://127.0.0.1:{port}"


async def _run(client: str, requests: int, tls_dir: str | None, holder: str = "h11") -> None:
    import ssl

    import httpx2

    from ftwbridge.mesh.channel import HopClient
    from ftwbridge.mesh.tls import client_context, server_context

    server_tls: ssl.SSLContext | None = None
    client_tls: ssl.SSLContext | None = None
    if tls_dir is not None:
        from cluster.ca import ClusterCA

        ca = ClusterCA(Path(tls_dir))
        leaf = ca.leaf("holder")
        server_tls = server_context(leaf.certfile, leaf.keyfile)
        client_tls = client_context(ca.cafile)
    async with trio.open_nursery() as nursery:
        (listener,) = await trio.open_tcp_listeners(0, host="127.0.0.1")
        port = listener.socket.getsockname()[1]
        listeners: list[trio.abc.Listener[trio.abc.Stream]] = [listener]
        if server_tls is not None:
            listeners = [trio.SSLListener(listener, server_tls, https_compatible=True)]
        await nursery.start(trio.serve_listeners, _holder, listeners)
        url = f"{'https' if server_tls else 'http'}://127.0.0.1:{port}"
        if holder == "edge":
            url = await _edge_holder(nursery)
        elif holder == "lean":
            url = await _lean_holder(nursery, server_tls)
        if client == "hop":
            hop = HopClient(idle_s=60, tls=client_tls, connect_s=60)  # valgrind on a busy machine
            for _ in range(requests):
                answer = await hop.request(url, "POST", "/mcp", HEADERS, BODY)
                assert answer.status == 200
            await hop.aclose()
        else:
            http = httpx2.AsyncClient(  # as the hop's client was: pooled, no redirects
                timeout=httpx2.Timeout(60, connect=2.0, pool=2.0),
                follow_redirects=False,
                trust_env=False,
                verify=client_tls if client_tls is not None else True,
            )
            for _ in range(requests):
                r = await http.request("POST", url + "/mcp", headers=HEADERS, content=BODY)
                assert r.status_code == 200
            await http.aclose()
        nursery.cancel_scope.cancel()


def _count(client: str, requests: int, tls: bool, holder: str, tmp: Path) -> int:
    out = tmp / f"cg.{client}.{requests}.{tls}.{holder}"
    argv = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"]
    argv += [sys.executable, __file__, "--inner", client, "--requests", str(requests)]
    argv += ["--holder", holder]
    if tls:
        argv += ["--tls"]
    subprocess.run(argv, check=True, capture_output=True, cwd=tmp)
    return int(dump_total(out))


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--requests", type=int, default=300)
    p.add_argument("--tls", action="store_true", help="both ends on TLS")
    p.add_argument("--client", choices=("hop", "httpx2"), help="only this client")
    p.add_argument(
        "--holder",
        choices=("h11", "edge", "lean"),
        default="h11",
        help="the holder: a bare h11 server (h11), hypercorn through ftwbridge.edge with a"
        " plain ASGI app, as the internal listener was (edge; plain TCP only), or the internal"
        " listener itself (lean)",
    )
    p.add_argument("--inner", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.inner:
        with tempfile.TemporaryDirectory() as t:
            trio.run(_run, args.inner, args.requests, t if args.tls else None, args.holder)
        return
    with tempfile.TemporaryDirectory() as t:
        for client in [args.client] if args.client else ["hop", "httpx2"]:
            none = _count(client, 1, args.tls, args.holder, Path(t))
            many = _count(client, 1 + args.requests, args.tls, args.holder, Path(t))
            per = (many - none) / args.requests / 1e6
            print(
                f"{client:7} {'TLS' if args.tls else 'TCP'}: {per:.3f} M instructions per request"
                " and answer, both ends",
                flush=True,
            )


if __name__ == "__main__":
    main()
