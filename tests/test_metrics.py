"""The fault gauges (docs/operations.md, "Metrics and health"): door tunnels, pending keys handshakes, connections by state.

Each goes up while its thing exists and back to zero once it is gone, read the way `/metrics`
reads it (the bridge's own registry). Tunnels and handshakes run on the in-memory rig and
MockClock; connections run a real hypercorn listener on 127.0.0.1 with the guard, and wait
with `wait_all_tasks_blocked` (the server has done all it can with what it was sent).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
import trio.testing
from quart_trio import QuartTrio

from ftwbridge import edge
from ftwbridge.keys import KeysClient, KeysPort, KeysService, serve_keys
from ftwbridge.keys.service import KeysError
from ftwbridge.metrics import Metrics
from ftwbridge.proto.names import Read
from ftwbridge.proto.noise import generate_static
from ftwbridge.proto.refusal import Refusal
from tests.harness import Rig


def _gauge(metrics: Metrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


async def test_door_tunnels_up_and_back_to_zero(
    nursery: trio.Nursery, autojump_clock: trio.abc.Clock
) -> None:
    rig = Rig(nursery)
    await rig.start()
    metrics = Metrics()
    metrics.watch(rig.pool, rig.door, rig.keys)
    stub = await rig.add_home()
    key, _ = await rig.grant(stub)
    other, _ = await rig.grant(stub)
    assert _gauge(metrics, "ftwbridge_door_tunnels") == 0
    with trio.fail_after(5):
        await rig.pool.call("h1", key, Read.LIVE_GET)
        await rig.pool.call("h1", other, Read.LIVE_GET)
    assert _gauge(metrics, "ftwbridge_door_tunnels") == 2
    await trio.sleep(rig.config.idle_close_s + 1)  # both sessions close for idleness
    assert _gauge(metrics, "ftwbridge_door_tunnels") == 0
    with trio.fail_after(5):
        await rig.pool.call("h1", key, Read.LIVE_GET)
    assert _gauge(metrics, "ftwbridge_door_tunnels") == 1
    await rig.links[0].close(1006)  # the box goes away: its tunnels end with the uplink
    await trio.sleep(1)
    assert _gauge(metrics, "ftwbridge_door_tunnels") == 0
    assert _gauge(metrics, "ftwbridge_uplinks") == 0


async def test_pending_handshakes_up_and_back_to_zero(
    nursery: trio.Nursery, autojump_clock: trio.abc.Clock
) -> None:
    rig = Rig(nursery)
    await rig.start()
    metrics = Metrics()
    metrics.watch(rig.pool, rig.door, rig.keys)
    stub = await rig.add_home()
    key, _ = await rig.grant(stub)
    assert _gauge(metrics, "ftwbridge_keys_handshakes_pending") == 0
    stub.hold = True  # the box reads message 1 and never answers
    refused: list[Refusal] = []

    async def call() -> None:
        try:
            await rig.pool.call("h1", key, Read.LIVE_GET)
        except Refusal as exc:
            refused.append(exc)

    async with trio.open_nursery() as inner:
        inner.start_soon(call)
        await trio.sleep(1)
        assert _gauge(metrics, "ftwbridge_keys_handshakes_pending") == 1
    assert refused and _gauge(metrics, "ftwbridge_keys_handshakes_pending") == 0  # aborted
    stub.hold = False
    with trio.fail_after(5):
        await rig.pool.call("h1", key, Read.LIVE_GET)
    assert _gauge(metrics, "ftwbridge_keys_handshakes_pending") == 0  # finished


@pytest.mark.parametrize("mode", ["in-process", "socket"])
async def test_pending_handshakes_of_the_keys_part(
    mode: str, tmp_path: Path, nursery: trio.Nursery
) -> None:
    """Each way a handshake leaves: finished, finished with a bad message 2, aborted."""
    service = KeysService(None)
    port: KeysPort = service
    if mode == "socket":
        await nursery.start(serve_keys, tmp_path / "keys.sock", service)
        port = KeysClient(tmp_path / "keys.sock")
    _box_private, box_public = generate_static()
    key = await port.create("h1")
    handles = [(await port.begin(key, box_public))[0] for _ in range(3)]
    assert port.pending_handshakes == service.pending_handshakes == 3
    with pytest.raises(KeysError):
        await port.finish(handles[0], b"not a message 2")
    assert port.pending_handshakes == service.pending_handshakes == 2
    await port.abort(handles[1])
    await port.abort(handles[1])  # twice, as the pool may after a failed finish: no harm
    assert port.pending_handshakes == service.pending_handshakes == 1
    await port.abort(handles[2])
    assert port.pending_handshakes == service.pending_handshakes == 0


def _probe_app(entered: trio.Event, release: trio.Event) -> QuartTrio:
    app = QuartTrio("probe")

    @app.route("/slow")
    async def slow() -> str:
        entered.set()
        await release.wait()
        return "ok"

    return app


async def _read_head(stream: trio.SocketStream) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = await stream.receive_some(4096)
        assert chunk, data
        data += chunk
    return data


async def test_connections_by_state_up_and_back_to_zero(
    nursery: trio.Nursery,
) -> None:
    metrics = Metrics()
    config = edge.EdgeConfig()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = None
    config.connections = metrics.listener("main")
    entered, release = trio.Event(), trio.Event()
    binds = await nursery.start(edge.serve, _probe_app(entered, release), config)
    port = int(binds[0].rsplit(":", 1)[1])

    async def states() -> dict[str, float | None]:
        await trio.testing.wait_all_tasks_blocked()
        return {
            s.value: _gauge(metrics, "ftwbridge_connections", listener="main", state=s.value)
            for s in edge.State
        }

    def only(**expected: int) -> dict[str, float]:
        return {s.value: float(expected.get(s.value, 0)) for s in edge.State}

    with trio.fail_after(20):
        assert await states() == only()
        http = await trio.open_tcp_stream("127.0.0.1", port)
        assert await states() == only(idle=1)
        await http.send_all(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
        await entered.wait()
        assert await states() == only(request=1)
        release.set()
        assert b"200" in await _read_head(http)
        assert await states() == only(idle=1)  # kept alive for the next request

        h2 = await trio.open_tcp_stream("127.0.0.1", port)
        await h2.send_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        assert await states() == only(idle=1, http2=1)  # a WebSocket is the door's listener's

        for stream in (http, h2):
            await stream.aclose()
        assert await states() == only()
    nursery.cancel_scope.cancel()
