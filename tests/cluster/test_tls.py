"""The internal hop over TLS (docs/operations.md, "Trust across the internal hop"): three
instances whose internal listeners serve certificates of a cluster CA (`cluster/ca.py`) and
forward only over it. A call entering elsewhere is answered by the holder through TLS; the
internal listener speaks no plain HTTP, and a client that does not trust the cluster's CA
does not get through. Processes: `conftest.running_cluster(tls=True)`."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx2
import pytest
import trio

from ftwbridge.mesh import signing
from ftwbridge.mesh.tls import client_context
from tests.store.pgserver import PgServer

from .conftest import BOUND_S, Cluster, running_cluster
from .test_forwarding import _epoch, base_headers, call_status, metric


@pytest.fixture(scope="module")
def tls_cluster(pg_server: PgServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(pg_server, tmp_path_factory.mktemp("tls"), tls=True) as made:
        yield made


async def test_a_forwarded_call_crosses_the_hop_over_tls(tls_cluster: Cluster) -> None:
    cluster = tls_cluster
    b1, b2, _b3 = cluster.instances.values()
    assert b1.internal.startswith("https://") and cluster.cafile is not None
    token = cluster.tokens["a1"]
    line = 'ftwbridge_mcp_requests_total{method="tools/call",outcome="forwarded"}'
    with trio.fail_after(BOUND_S):
        before = await metric(cluster, "b-2", line)
        forwarded = await call_status(b2.mcp, token, "2026-07-28")
        assert not forwarded.is_error, forwarded
        assert await metric(cluster, "b-2", line) == before + 1  # b-2 forwarded it, over TLS


async def test_the_internal_listener_speaks_only_tls_to_those_who_trust_the_ca(
    tls_cluster: Cluster,
) -> None:
    cluster = tls_cluster
    b1 = cluster.instances["b-1"]
    assert cluster.cafile is not None
    token = cluster.tokens["a1"]
    body = b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}'
    with trio.fail_after(BOUND_S):
        epoch = await _epoch(cluster, "h1")
        sent = base_headers(token)

        def signed() -> dict[str, str]:
            return sent | signing.sign(
                cluster.mesh_key,
                sender="b-2",
                method="POST",
                path="/mcp",
                to="b-1",
                epoch=epoch,
                body=body,
                now_ms=time.time_ns() // 1_000_000,
                headers=list(sent.items()),
            )

        verify = client_context(cluster.cafile)
        async with httpx2.AsyncClient(verify=verify, timeout=BOUND_S) as http:
            ok = await http.post(b1.internal, headers=signed(), content=body)
        assert ok.status_code == 200 and ok.json()["result"]["tools"], ok.text
        plain = b1.internal.replace("https://", "http://")
        async with httpx2.AsyncClient(timeout=BOUND_S) as http:
            with pytest.raises(httpx2.HTTPError):  # no plain HTTP answer from a TLS listener
                await http.post(plain, headers=signed(), content=body)
        async with httpx2.AsyncClient(timeout=BOUND_S) as http:  # the system's CAs only
            with pytest.raises(httpx2.ConnectError):  # the certificate does not verify
                await http.post(b1.internal, headers=signed(), content=body)


async def test_the_keys_channel_runs_in_tls_verified_by_the_cluster_ca(
    tls_cluster: Cluster,
) -> None:
    """The keys service answers the mesh's handshake inside TLS only: a peer that trusts the
    cluster's CA opens the channel; plain TCP gets nothing of it."""
    from ftwbridge.keys.mesh import MeshChannel

    cluster = tls_cluster
    assert cluster.cafile is not None
    host, port = cluster.env["FTWBRIDGE_KEYS_URL"].removeprefix("tcp://").split(":")
    with trio.fail_after(BOUND_S):
        secure = await trio.open_ssl_over_tcp_stream(
            host, int(port), ssl_context=client_context(cluster.cafile)
        )
        async with secure:
            channel = MeshChannel(cluster.mesh_key, client=True)
            while not channel.is_open:
                await secure.send_all(channel.data_to_send())
                data = await secure.receive_some(65536)
                assert data, "the keys service hung up inside TLS"
                channel.receive_data(data)
        plain = await trio.open_tcp_stream(host, int(port))
        async with plain:
            channel = MeshChannel(cluster.mesh_key, client=True)
            await plain.send_all(channel.data_to_send())
            got = b""
            with trio.move_on_after(5):
                while chunk := await plain.receive_some(65536):
                    got += chunk
            assert not channel.receive_data(got) and not channel.is_open
