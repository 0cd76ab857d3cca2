"""The cluster's child processes, each owned by a trio nursery.

`start_child` runs one program as a task of the caller's nursery: a pipe on its standard input
that is never written (its lifeline: `--exit-with-parent` for `ftwbridge serve` and the stub
homes, `cluster.lifeline` around PostgreSQL and HAProxy), its output copied line by line to a
log file of its own, and a readiness test (a line it prints, or a port that accepts). When the
task is cancelled the program gets SIGTERM (its lifeline closed too) and SIGKILL after
`STOP_S`; either way the task returns only once the program is gone, so nothing outlives the
nursery (docs/operations.md, "Child processes").
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import trio

from devtools.rig import free_port as free_port

PY = sys.executable
ROOT = Path(__file__).resolve().parents[1]
"""The project's folder: every child runs there, so `python -m cluster.lifeline` is found."""
WAIT_S = 60.0
"""Bound on one program's start, seconds: generous for a loaded 2-core machine."""
STOP_S = 15.0
"""How long a program may take to stop after SIGTERM before SIGKILL, seconds (an instance
drains for its `drain_s` first)."""


def pin(cpu: int | None) -> list[str]:
    """The `taskset` prefix that keeps a program on `cpu` (none for None, or without taskset)."""
    if cpu is None or shutil.which("taskset") is None:
        return []
    return ["taskset", "-c", str(cpu)]


def child_env() -> dict[str, str]:
    """This process's environment without `FTWBRIDGE_*` variables: every instance takes its
    settings from its own file alone (a variable would override them all alike)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("FTWBRIDGE_")}


class CannotStart(Exception):
    """Something the cluster needs cannot start; the message is the one sentence shown.
    `port_taken`: a port of the command line is in use (the sentence then says how to pick
    another)."""

    def __init__(self, message: str, *, port_taken: bool = False) -> None:
        super().__init__(message)
        self.port_taken = port_taken


@contextlib.contextmanager
def reserved_port(port: int, what: str) -> Iterator[None]:
    """Hold 127.0.0.1:`port` for `what` while the context runs: a socket bound there (with
    SO_REUSEADDR) and never listening, so the kernel hands the port to no other socket that
    binds port 0 and to no outgoing connection, while `what` (which sets SO_REUSEADDR, as
    HAProxy does) can still bind and listen on it.

    Raises:
        CannotStart: the port cannot be bound now (`port_taken` when it is in use).
    """
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError as exc:
            taken = exc.errno == errno.EADDRINUSE
            why = "the port is in use" if taken else (exc.strerror or str(exc))
            raise CannotStart(
                f"{what} cannot listen on 127.0.0.1:{port}: {why}", port_taken=taken
            ) from None
        yield


async def wait_port(port: int, child: Child, bound_s: float = WAIT_S) -> None:
    """Return once 127.0.0.1:`port` accepts a connection.

    Raises:
        CannotStart: `child` exited first, or `bound_s` seconds passed.
    """
    with trio.move_on_after(bound_s):
        while child.proc.returncode is None:
            try:
                stream = await trio.open_tcp_stream("127.0.0.1", port)
            except OSError:
                await trio.sleep(0.1)  # nothing listens yet: try again (bounded above)
                continue
            await stream.aclose()
            return
    raise CannotStart(f"{child.name} did not start: {child.tail()}")


@dataclass
class Child:
    """A running program: its `name`, `proc`, `log` file and the `line` that said it was
    ready ("" when readiness was a port)."""

    name: str
    proc: trio.Process
    log: Path
    line: str = ""
    lines: list[str] = field(default_factory=list)
    """Its last lines of output (at most 20), for the sentence when it fails."""

    @property
    def pid(self) -> int:
        """The process id."""
        return int(self.proc.pid)

    def signal(self, sig: int) -> None:
        """Send `sig` if it still runs."""
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(sig)

    def tail(self) -> str:
        """Its exit (if it exited) and last line of output, as words."""
        last = self.lines[-1] if self.lines else "nothing"
        status = self.proc.returncode
        exited = "it is still running" if status is None else f"it exited with status {status}"
        return f"{exited}; it said: {last} (log: {self.log})"


async def _pump(
    stream: trio.abc.ReceiveStream, child: Child, fd: int, ready: str | None, seen: trio.Event
) -> None:
    """Copy `stream` to the log `fd` line by line; the first line holding `ready` sets `seen`."""
    buf = b""
    while chunk := await stream.receive_some(65536):
        os.write(fd, chunk)
        buf += chunk
        *done, buf = buf.split(b"\n")
        for raw in done:
            text = raw.decode(errors="replace")
            child.lines = [*child.lines[-19:], text]
            if ready is not None and not seen.is_set() and ready in text:
                child.line = text
                seen.set()


async def start_child(
    nursery: trio.Nursery,
    name: str,
    argv: list[str],
    log: Path,
    *,
    ready: str | None = None,
    env: dict[str, str] | None = None,
) -> Child:
    """Start `argv` as a task of `nursery` (see the module docstring) and return it once it
    printed a line holding `ready` on stdout or stderr (None: at once).

    Raises:
        CannotStart: it exited, or printed no such line within `WAIT_S`.
    """
    child: Child = await nursery.start(_run, name, argv, log, ready, env)
    return child


async def _run(
    name: str,
    argv: list[str],
    log: Path,
    ready: str | None,
    env: dict[str, str] | None,
    *,
    task_status: trio.TaskStatus[Child],
) -> None:
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        proc = await trio.lowlevel.open_process(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=ROOT,
            start_new_session=True,  # the terminal's Ctrl-C reaches the cluster alone, which
            env=child_env() if env is None else env,  # then stops its children in order
        )
    except OSError as exc:
        os.close(fd)
        raise CannotStart(f"{name} cannot be started: {argv[0]}: {exc.strerror or exc}") from None
    child = Child(name, proc, log)
    seen = trio.Event()
    failed = False
    try:
        async with trio.open_nursery() as pumps:
            assert proc.stdout is not None and proc.stderr is not None
            pumps.start_soon(_pump, proc.stdout, child, fd, ready, seen)
            pumps.start_soon(_pump, proc.stderr, child, fd, ready, seen)
            if ready is not None and not await _ready(proc, seen):
                await _stop(child)
                # its last words are the sentence's: read them to the end of its output
                pumps.cancel_scope.deadline = trio.current_time() + DRAIN_S
                failed = True
            else:
                task_status.started(child)
                await proc.wait()
        if failed:  # raised here, outside the pumps' nursery, so as itself and not in a group
            raise CannotStart(f"{name} did not start: {child.tail()}")
    finally:
        await _stop(child)
        os.close(fd)


DRAIN_S = 5.0
"""How long the output of a program that exited before it was ready is still read, seconds."""


async def _ready(proc: trio.Process, seen: trio.Event) -> bool:
    """Whether `seen` is set before `proc` exits, within `WAIT_S`."""
    with trio.move_on_after(WAIT_S):
        async with trio.open_nursery() as race:

            async def exited() -> None:
                await proc.wait()
                race.cancel_scope.cancel()

            async def said() -> None:
                await seen.wait()
                race.cancel_scope.cancel()

            race.start_soon(exited)
            race.start_soon(said)
    return seen.is_set()


async def _stop(child: Child) -> None:
    """Close the lifeline, SIGTERM, SIGKILL after `STOP_S`; returns once it is gone."""
    with trio.CancelScope(shield=True):
        proc = child.proc
        if proc.stdin is not None:
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                await proc.stdin.aclose()
        child.signal(signal.SIGTERM)
        with trio.move_on_after(STOP_S):
            await proc.wait()
        child.signal(signal.SIGKILL)
        await proc.wait()
