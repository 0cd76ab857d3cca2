"""hypercorn's own behaviour against the inputs `ftwbridge.edge` guards, with and without the guard.

If the unguarded case stops failing, hypercorn has fixed it upstream: this test then fails on
purpose, so that whoever upgrades reads `docs/upstream-hypercorn.md` and decides whether the
guard can go.
"""

from __future__ import annotations

import socket
from typing import Any

import hypercorn
import hypercorn.trio.run as hypercorn_run
import trio
from hypercorn.trio import serve
from hypercorn.trio.tcp_server import TCPServer
from quart import websocket
from quart_trio import QuartTrio

from ftwbridge import edge

from .live import WS_UPGRADE

UNGUARDED = TCPServer


def _app() -> QuartTrio:
    app = QuartTrio("probe")

    @app.websocket("/ws")
    async def ws() -> None:
        await websocket.accept()
        await websocket.receive()

    @app.route("/")
    async def index() -> str:
        return "ok"

    return app


def _byte_after_upgrade(port: int) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(WS_UPGRADE.format(path="/ws", host=f"127.0.0.1:{port}").encode() + b"x")
        out = b""
        while chunk := sock.recv(4096):
            out += chunk
        return out


def _get(port: int) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        out = b""
        while chunk := sock.recv(4096):
            out += chunk
        return out


async def _serve(serve_with: Any) -> tuple[BaseException | None, bytes, bytes]:
    """Serve the probe app with `serve_with` (hypercorn's `serve`, or `edge.serve`), send the
    byte after the upgrade, then a normal GET; returns (what serve raised, the first answer,
    the GET's)."""
    config = edge.EdgeConfig()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = None
    failure: BaseException | None = None
    first = second = b""
    with trio.fail_after(30):
        try:
            async with trio.open_nursery() as nursery:
                binds = await nursery.start(serve_with, _app(), config)
                port = int(binds[0].rsplit(":", 1)[1])
                first = await trio.to_thread.run_sync(_byte_after_upgrade, port)
                await trio.sleep(0.2)  # the connection task ends; an escaping error lands now
                second = await trio.to_thread.run_sync(_get, port)
                nursery.cancel_scope.cancel()
        except Exception as exc:
            failure = exc
    return failure, first, second


async def test_unguarded_hypercorn_still_falls_over() -> None:
    failure, _, _ = await _serve(serve)
    assert failure is not None, (
        f"hypercorn {hypercorn.__version__ if hasattr(hypercorn, '__version__') else ''} no longer"
        " lets one connection's error stop the server: see docs/upstream-hypercorn.md and"
        " consider retiring ftwbridge/edge/"
    )


async def test_guarded_hypercorn_ends_only_that_connection() -> None:
    failure, first, second = await _serve(edge.serve)
    assert failure is None
    assert first.startswith(b"HTTP/1.1 400 ")
    assert second.startswith(b"HTTP/1.1 200 ") and second.endswith(b"ok")
    assert hypercorn_run.TCPServer is UNGUARDED  # hypercorn's own module is left as it was


def test_the_guard_relies_on_what_hypercorn_has() -> None:
    """Every name of hypercorn's insides that `ftwbridge.edge` lists at its top (and
    `hypercorn.trio.task_group.TaskGroup._nursery`, which it cancels); a rename
    upstream fails here first."""
    import inspect

    from hypercorn import events, utils
    from hypercorn.protocol import h2
    from hypercorn.trio import lifespan, statsd, task_group, tcp_server, worker_context

    for name in ("run", "_read_data", "_close", "protocol_send", "_initiate_server_close"):
        assert callable(getattr(UNGUARDED, name, None)), name
    source = inspect.getsource(UNGUARDED)
    for attribute in ("config", "context", "stream", "send_lock", "idle_task"):
        assert f"self.{attribute} = " in source, attribute
    for attribute in ("protocol", "_task_group"):
        assert f"self.{attribute} = " in source, attribute
    assert "self.protocol = ProtocolWrapper(" in source  # its `.protocol`: H11 or H2 or ...
    assert "self._nursery: trio.Nursery | None" in inspect.getsource(task_group.TaskGroup)
    assert isinstance(tcp_server.MAX_RECV, int)
    assert inspect.isclass(h2.H2Protocol)
    for event in ("Closed", "Event", "RawData", "Updated"):
        assert inspect.isclass(getattr(events, event)), event
    assert callable(lifespan.Lifespan) and callable(worker_context.WorkerContext)
    assert callable(statsd.StatsdLogger)
    for name in ("wrap_app", "raise_shutdown", "repr_socket_addr", "ShutdownError"):
        assert hasattr(utils, name), name
    assert hasattr(hypercorn_run, "TCPServer")


def test_the_accept_loop_copied_is_hypercorns() -> None:
    """`edge.serve` copies hypercorn's `worker_serve`; a change of it upstream fails here, to
    be copied again."""
    import inspect

    source = inspect.getsource(hypercorn_run.worker_serve)
    for step in (
        "Lifespan(app, config, lifespan_state)",
        "WorkerContext(max_requests)",
        "config.set_statsd_logger_class(StatsdLogger)",
        "ConnectionState(lifespan_state.copy())",
        "handler_nursery=server_nursery",
        "raise_shutdown, context.terminate.wait",
        "error.split((ShutdownError, KeyboardInterrupt))",
        "await context.terminated.set()",
        "trio.current_time() + config.graceful_timeout",
        "await lifespan.wait_for_shutdown()",
    ):
        assert step in source, step


def test_the_read_loop_copied_is_hypercorns() -> None:
    """`GuardedTCPServer._read_loop` copies hypercorn's read loop to lift its timeout for a
    stream: a change of that loop upstream fails here, to be copied again."""
    import inspect

    from hypercorn.trio import tcp_server

    source = inspect.getsource(tcp_server.TCPServer._read_data)
    assert "trio.fail_after(self.config.read_timeout or inf)" in source
    assert "receive_some(MAX_RECV)" in source and "RawData(bytes(data))" in source
    assert tcp_server.MAX_RECV == 2**16


def test_only_edge_knows_hypercorns_insides_and_nothing_assigns_to_them() -> None:
    """`ftwbridge.edge` is the one package that imports hypercorn's insides (anything but its
    public `hypercorn.config`), and no module of ftwbridge or stubbox assigns to an attribute of an imported module of
    hypercorn, h11 or wsproto."""
    import ast
    from pathlib import Path

    root = Path(edge.__file__).parents[2]
    public = {"hypercorn.config"}
    insiders: dict[str, set[str]] = {}
    assigned: list[str] = []
    for path in [
        *root.joinpath("ftwbridge").rglob("*.py"),
        *root.joinpath("stubbox").rglob("*.py"),
    ]:
        tree = ast.parse(path.read_text())
        aliases: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.split(".")[0] in ("hypercorn", "h11", "wsproto"):
                        aliases.add((a.asname or a.name).split(".")[0])
            elif (
                isinstance(node, ast.ImportFrom)
                and node.module
                and node.level == 0
                and node.module.startswith("hypercorn")
                and node.module not in public
            ):
                insiders.setdefault(str(path.relative_to(root)), set()).add(node.module)
        for node in ast.walk(tree):
            targets = node.targets if isinstance(node, ast.Assign) else []
            for target in targets:
                if (
                    isinstance(target, ast.Attribute)
                    and isinstance(target.value, ast.Name)
                    and target.value.id in aliases
                ):
                    assigned.append(f"{path.name}: {target.value.id}.{target.attr}")
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "setattr"
                and node.args
                and isinstance(node.args[0], ast.Name)
                and node.args[0].id in aliases
            ):
                assigned.append(f"{path.name}: setattr({node.args[0].id}, ...)")
    assert insiders and all(p.startswith("ftwbridge/edge/") for p in insiders), insiders
    assert not assigned, assigned
