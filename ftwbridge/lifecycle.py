"""Process lifetime: run until done or signalled, with an optional drain on the first signal.

SIGTERM and SIGINT stop the process (docs/operations.md, "Signals"). SIGHUP, which by default
would end it at once without a word (a terminal closing, an operator's `kill -HUP` expecting a
reload), is ignored with one warning line: nothing is reloaded from a signal, since every
setting is read once at start, and a changed configuration takes a restart.
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable

import trio

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
IGNORED_SIGNALS = (signal.SIGHUP,)
"""Signals logged and otherwise ignored while `until_signalled` runs (see the module)."""
log = logging.getLogger("ftwbridge")


class StartupError(Exception):
    """A process cannot start as configured (a port in use, a state folder it cannot write,
    no state where a command needs some). The message is one sentence for the operator; the
    command line prints it and exits with status 2, without a traceback.

    Args:
        message: what is wrong, one sentence without its remedy.
        setting: the configuration key that would mend it, if one does (the command line
            adds how to change it).
    """

    def __init__(self, message: str, *, setting: str | None = None) -> None:
        super().__init__(message)
        self.setting = setting


async def until_signalled(
    run: Callable[[trio.Nursery], Awaitable[None]],
    *,
    drain: Callable[[], Awaitable[None]] | None = None,
) -> int:
    """Run `run(nursery)` until it returns or SIGTERM/SIGINT arrives.

    The first signal calls `drain` (if given) and then stops; without `drain`, or on a second
    signal, everything is cancelled at once. Returns 0, or 1 when a second signal cut a drain.
    SIGHUP is logged and ignored (`IGNORED_SIGNALS`).
    """
    status = 0
    with trio.open_signal_receiver(*STOP_SIGNALS, *IGNORED_SIGNALS) as signals:
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
                async for sig in signals:
                    if sig in IGNORED_SIGNALS:
                        log.warning(
                            "%s ignored: settings are read only at start, so nothing is"
                            " reloaded; restart the process (SIGTERM) to apply a change",
                            signal.Signals(sig).name,
                        )
                        continue
                    if draining or drain is None:
                        status = 1 if draining else 0
                        nursery.cancel_scope.cancel()
                        return
                    draining = True
                    nursery.start_soon(drain_then_stop)

            nursery.start_soon(watch)
            nursery.start_soon(main)
    return status


async def until_stdin_closes() -> None:
    """Return once standard input reaches end-of-file.

    A parent that starts this process with a pipe on its standard input (and never writes to
    it) makes it a lifeline: when the parent ends, however it ends (SIGKILL included), the
    pipe closes and this returns, so the child can stop instead of living on as an orphan.
    Anything written is read and ignored.
    """
    stdin = trio.lowlevel.FdStream(os.dup(sys.stdin.fileno()))
    async with stdin:
        while await stdin.receive_some(4096):
            pass


YOUNG_THRESHOLD = 10_000
"""Allocations less deallocations of tracked objects that start a young collection (Python's
default is 700). A call allocates hundreds of short-lived containers and refcounting frees
nearly all of them; at 700 the collector ran a young pass every call or two and moved what was
alive in that instant (the calls in flight) to the older generations."""


def settle_heap() -> None:
    """Tune Python's cyclic collector for a long-running server, once it has started.

    Collects once, then freezes what is left (`gc.freeze`: every module, class, the app and the
    configuration, built at start-up and alive for the whole process) so the collector's full
    passes no longer walk it, and raises the young generation's threshold to
    `YOUNG_THRESHOLD`. Measured with `bench/batches.py` at 64 connections (docs/performance.md,
    "The collector"): the longest full pass went from about 130 ms to 15 ms with the freeze,
    and the collector's time from about 390 to 5 ms in 5 s with both. Process-wide; call it
    from a process's own `serve`, not from code that many tests run in one process (a frozen
    object is never collected, so a test's bridge frozen while alive would stay for good).
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, *gc.get_threshold()[1:])
