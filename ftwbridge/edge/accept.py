"""The accept loop of every hypercorn listener of the bridge: `hypercorn.trio.serve` with each
connection served by a `guard.GuardedTCPServer` (a copy of hypercorn's `worker_serve`, less
QUIC; `tests/edge/test_hypercorn.py` checks the copy against hypercorn's)."""

from __future__ import annotations

import warnings
from collections.abc import Awaitable, Callable
from functools import partial
from random import randint
from typing import Any

import trio
from hypercorn.trio.lifespan import Lifespan
from hypercorn.trio.statsd import StatsdLogger
from hypercorn.trio.worker_context import WorkerContext
from hypercorn.typing import ConnectionState
from hypercorn.utils import ShutdownError, raise_shutdown, repr_socket_addr, wrap_app

from ftwbridge.edgerules import EdgeConfig
from ftwbridge.listening import PatientListener

from .guard import GuardedTCPServer


async def serve(
    app: Any,
    config: EdgeConfig,
    *,
    shutdown_trigger: Callable[..., Awaitable[None]] | None = None,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the ASGI `app` on `config`'s binds, each connection by a `GuardedTCPServer`:
    `hypercorn.trio.serve` with our own accept loop (its `worker_serve`, less QUIC, which no
    listener of ours binds). Reports the bound URLs (`http://host:port`) as started; returns
    once `shutdown_trigger` returns and the responses under way have had `graceful_timeout`.

    Raises:
        ValueError: `config` binds QUIC (`quic_bind`), which this loop does not serve.
    """
    if config.debug:
        warnings.warn("The config `debug` has no affect when using serve", Warning, stacklevel=2)
    if config.workers != 1:
        warnings.warn("The config `workers` has no affect when using serve", Warning, stacklevel=2)
    wrapped = wrap_app(app, config.wsgi_max_body_size, None)
    config.set_statsd_logger_class(StatsdLogger)
    lifespan_state: dict[str, Any] = {}
    lifespan = Lifespan(wrapped, config, lifespan_state)
    max_requests = None
    if config.max_requests is not None:
        max_requests = config.max_requests + randint(0, config.max_requests_jitter)
    context = WorkerContext(max_requests)
    async with trio.open_nursery() as lifespan_nursery:
        await lifespan_nursery.start(lifespan.handle_lifespan)
        await lifespan.wait_for_startup()
        connection = partial(
            GuardedTCPServer, wrapped, config, context, ConnectionState(lifespan_state.copy())
        )
        await _accept(connection, config, context, shutdown_trigger, task_status)
        await lifespan.wait_for_shutdown()
        lifespan_nursery.cancel_scope.cancel()


async def _accept(
    connection: Callable[[trio.abc.Stream], GuardedTCPServer],
    config: EdgeConfig,
    context: Any,
    shutdown_trigger: Callable[..., Awaitable[None]] | None,
    task_status: trio.TaskStatus[list[str]],
) -> None:
    """The accept loop of `serve`: one `GuardedTCPServer` per connection in a nursery that
    outlives the listeners by `graceful_timeout` (hypercorn's `worker_serve`)."""
    async with trio.open_nursery() as server_nursery:
        sockets = config.create_sockets()
        if sockets.quic_sockets:
            raise ValueError("edge.serve serves TCP only; quic_bind is not supported")
        listeners: list[trio.abc.Listener[Any]] = []
        binds = []
        ssl_context = config.create_ssl_context()
        for sock in sockets.secure_sockets:
            assert ssl_context is not None  # secure sockets come with a certificate
            sock.listen(config.backlog)
            binds.append(f"https://{repr_socket_addr(sock.family, sock.getsockname())}")
            listeners.append(
                trio.SSLListener(_patient(sock, binds[-1]), ssl_context, https_compatible=True)
            )
        for sock in sockets.insecure_sockets:
            sock.listen(config.backlog)
            binds.append(f"http://{repr_socket_addr(sock.family, sock.getsockname())}")
            listeners.append(_patient(sock, binds[-1]))
        for bind in binds:
            await config.log.info(f"Running on {bind} (CTRL + C to quit)")
        task_status.started(binds)
        try:
            async with trio.open_nursery(strict_exception_groups=True) as nursery:
                if shutdown_trigger is not None:
                    nursery.start_soon(raise_shutdown, shutdown_trigger)
                nursery.start_soon(raise_shutdown, context.terminate.wait)
                nursery.start_soon(
                    partial(
                        trio.serve_listeners, connection, listeners, handler_nursery=server_nursery
                    )
                )
                await trio.sleep_forever()
        except BaseExceptionGroup as error:
            _, other_errors = error.split((ShutdownError, KeyboardInterrupt))
            if other_errors is not None:
                raise other_errors from None
        finally:
            await context.terminated.set()
            server_nursery.cancel_scope.deadline = trio.current_time() + config.graceful_timeout


def _patient(sock: Any, bind: str) -> PatientListener:
    """The listener of the bound, listening `sock`, whose accept waits out a full file table
    in sentences (`listening.PatientListener`), named by its URL `bind`."""
    return PatientListener(
        trio.SocketListener(trio.socket.from_stdlib_socket(sock)), f"the listener on {bind}"
    )
