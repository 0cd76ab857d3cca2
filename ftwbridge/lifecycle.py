"""Process lifetime: run until done or signalled, with an optional drain on the first signal.

SIGTERM and SIGINT stop the process (docs/operations.md, "Signals"). SIGHUP, which by default
would end it at once without a word (a terminal closing, an operator's `kill -HUP` expecting a
reload), is ignored with one warning line: nothing is reloaded from a signal, since every
setting is read once at start, and a changed configuration takes a restart.
"""

from __future__ import annotations

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
