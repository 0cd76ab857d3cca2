"""`python -m cluster.lifeline [--stop SIGNAL] -- PROGRAM ARGS...`: run a program that has no
`--exit-with-parent` of its own (PostgreSQL, HAProxy) so that it ends with its parent.

The parent passes a pipe on standard input and never writes it. When the pipe reaches
end-of-file (the parent ended, SIGKILL included) or this process gets SIGTERM or SIGINT, the
program gets `--stop` (default SIGTERM; PostgreSQL's fast shutdown is SIGINT), and SIGKILL if it
is still running `STOP_S` seconds later. SIGHUP and SIGUSR2 are passed on to the program as
they come (HAProxy's master reloads on SIGUSR2). The program's own exit status is this one's;
its output goes where this process's goes. The rule is the project's for every child
(docs/operations.md, "Child processes").
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import subprocess
import sys

import trio

from ftwbridge.lifecycle import until_stdin_closes

STOP_S = 10.0
"""How long the program may take to stop after the stop signal before SIGKILL, seconds."""
PASSED_ON = (signal.SIGHUP, signal.SIGUSR2)
"""Signals passed on to the program unchanged (a reload, for the programs that have one)."""


async def supervise(argv: list[str], stop: signal.Signals) -> int:
    """Run `argv` until it exits, stopping it as the module docstring says; returns its exit
    status (128 + N when a signal N ended it).

    Raises:
        OSError: the program cannot be started (not found, not executable).
    """
    proc = await trio.lowlevel.open_process(argv, stdin=subprocess.DEVNULL)

    def stop_it(sig: int) -> None:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(sig)

    async def stop_then_kill() -> None:
        stop_it(stop)
        with trio.move_on_after(STOP_S):
            await proc.wait()
        stop_it(signal.SIGKILL)

    async with trio.open_nursery() as nursery:

        async def on_parent_gone() -> None:
            await until_stdin_closes()
            nursery.start_soon(stop_then_kill)

        async def on_signals() -> None:
            with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                async for _ in signals:
                    nursery.start_soon(stop_then_kill)

        async def pass_on() -> None:
            with trio.open_signal_receiver(*PASSED_ON) as signals:
                async for sig in signals:
                    stop_it(sig)

        nursery.start_soon(on_parent_gone)
        nursery.start_soon(on_signals)
        nursery.start_soon(pass_on)
        status = await proc.wait()
        nursery.cancel_scope.cancel()
    return status if status >= 0 else 128 - status


def main() -> None:
    """Entry point: parse `--stop` and the program, run it, exit with its status."""
    p = argparse.ArgumentParser(prog="python -m cluster.lifeline", description=__doc__)
    p.add_argument("--stop", default="SIGTERM", help="the signal that stops the program")
    p.add_argument("argv", nargs=argparse.REMAINDER)
    args = p.parse_args()
    argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    if not argv:
        p.error("name the program to run after --")
    try:
        status = trio.run(supervise, argv, signal.Signals[args.stop])
    except OSError as exc:
        print(f"lifeline: {argv[0]} cannot be started: {exc.strerror or exc}", file=sys.stderr)
        status = 127
    sys.exit(status)


if __name__ == "__main__":
    main()
