"""Process lifetime: run until done or signalled, with an optional drain on the first signal."""

from __future__ import annotations

import signal
from collections.abc import Awaitable, Callable

import trio

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


async def until_signalled(
    run: Callable[[trio.Nursery], Awaitable[None]],
    *,
    drain: Callable[[], Awaitable[None]] | None = None,
) -> int:
    """Run `run(nursery)` until it returns or SIGTERM/SIGINT arrives.

    The first signal calls `drain` (if given) and then stops; without `drain`, or on a second
    signal, everything is cancelled at once. Returns 0, or 1 when a second signal cut a drain.
    """
    status = 0
    with trio.open_signal_receiver(*STOP_SIGNALS) as signals:
        async with trio.open_nursery() as nursery:

            async def main() -> None:
                await run(nursery)
                nursery.cancel_scope.cancel()

            async def drain_then_stop() -> None:
                assert drain is not None
                await drain()
                nursery.cancel_scope.cancel()

            async def watch() -> None:
                nonlocal status
                draining = False
                async for _sig in signals:
                    if draining or drain is None:
                        status = 1 if draining else 0
                        nursery.cancel_scope.cancel()
                        return
                    draining = True
                    nursery.start_soon(drain_then_stop)

            nursery.start_soon(watch)
            nursery.start_soon(main)
    return status
