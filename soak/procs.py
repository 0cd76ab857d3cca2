"""The soak's processes and what it reads of them.

`ftwbridge serve` and the stub homes run as an operator runs them, each owned by the soak: a
pipe on standard input that the soak never writes (`--exit-with-parent` on both), so they go
when the soak goes, SIGKILL included; and `Children.aclose` (lifeline closed, SIGTERM, SIGKILL
after a bound) at the end whatever happened. The soak reads the bridge's `/metrics`, its open
descriptors (`/proc/PID/fd`), its resident memory (`/proc/PID/status`) and its log.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio
from prometheus_client.parser import text_string_to_metric_families

from devtools.rig import console, free_port

PY = sys.executable
WAIT_S = 30.0
"""Bound on a process start or on one cross-process wait (seconds); generous for a loaded
2-core machine, and a bound, never a measurement."""
STOP_S = 10.0
"""How long a child may take to stop after SIGTERM before it is killed (seconds)."""


class Children:
    """Every process the soak started; `aclose` ends those still running."""

    def __init__(self) -> None:
        self.procs: list[trio.Process] = []

    async def open(self, argv: list[str], log: Path) -> trio.Process:
        """Start `argv` with a lifeline on stdin, stdout piped, stderr appended to `log`."""
        err = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            proc = await trio.lowlevel.open_process(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err
            )
        finally:
            os.close(err)  # the child holds its own copy
        self.procs.append(proc)
        return proc

    async def aclose(self) -> None:
        """Close every lifeline, SIGTERM what still runs, SIGKILL after `STOP_S`."""
        with trio.CancelScope(shield=True):
            for proc in self.procs:
                if proc.stdin is not None:
                    await proc.stdin.aclose()
                if proc.returncode is None:
                    _signal(proc, signal.SIGCONT)  # a stalled home must hear the SIGTERM
                    _signal(proc, signal.SIGTERM)
            for proc in self.procs:
                with trio.move_on_after(STOP_S):
                    await proc.wait()
                if proc.returncode is None:
                    _signal(proc, signal.SIGKILL)
                    await proc.wait()
                if proc.stdout is not None:
                    await proc.stdout.aclose()


def _signal(proc: trio.Process, sig: int) -> None:
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):  # gone since we looked
            proc.send_signal(sig)


async def first_line(proc: trio.Process, bound_s: float = WAIT_S) -> str:
    """The first line the process prints (within `bound_s` seconds).

    Raises:
        RuntimeError: it exited or said nothing in time.
    """
    assert proc.stdout is not None
    buf = b""
    with trio.move_on_after(bound_s):
        while b"\n" not in buf:
            chunk = await proc.stdout.receive_some(4096)
            if not chunk:
                break
            buf += chunk
    if b"\n" not in buf:
        raise RuntimeError(f"{proc.args!r} printed no line within {bound_s} s: {buf[:200]!r}")
    return buf.split(b"\n", 1)[0].decode()


Sample = dict[str, float]
"""One `/metrics` reading: `name` or `name{label="v",...}` (labels sorted) -> value."""


def parse_metrics(text: str) -> Sample:
    """Prometheus text into a `Sample`."""
    out: Sample = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
            out[f"{s.name}{{{labels}}}" if labels else s.name] = s.value
    return out


def metric(sample: Sample, name: str, **labels: str) -> float:
    """One value of `sample` (0 when absent)."""
    if not labels:
        return sample.get(name, 0.0)
    key = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return sample.get(f"{name}{{{key}}}", 0.0)


def by_label(sample: Sample, name: str) -> dict[str, float]:
    """Every labelled value of `name`: the labels' text -> value."""
    prefix = name + "{"
    return {k[len(prefix) : -1]: v for k, v in sample.items() if k.startswith(prefix)}


@dataclass
class BridgeProc:
    """`ftwbridge serve` on fixed loopback ports (a restart keeps its URL), state in `root`.

    Args:
        root: the soak's folder (config, `state/`, logs).
        settings: the config's keys (TOML); `start(**overrides)` adds to them.
    """

    root: Path
    settings: dict[str, Any]
    children: Children
    port: int = field(default_factory=free_port)
    admin_port: int = field(default_factory=free_port)
    door_port: int = field(default_factory=free_port)
    """The door's own listener (`door_bind`): the homes dial it, the strangers visit it."""
    proc: trio.Process | None = None
    logs: list[Path] = field(default_factory=list)
    running: dict[str, Any] = field(default_factory=dict)
    """The settings of the process running now."""

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        """The `/mcp` URL (the tokens' audience)."""
        return self.base + "/mcp"

    @property
    def door_url(self) -> str:
        return f"ws://127.0.0.1:{self.door_port}/v1/box"

    @property
    def state_dir(self) -> Path:
        return self.root / "state"

    def config(self, **overrides: Any) -> dict[str, Any]:
        """The full settings a start with `overrides` runs with."""
        return {
            "bind": f"127.0.0.1:{self.port}",
            "public_url": self.base,
            "admin_bind": f"127.0.0.1:{self.admin_port}",
            "door_bind": f"127.0.0.1:{self.door_port}",
            "state_dir": str(self.state_dir),
            **self.settings,
            **overrides,
        }

    async def start(self, **overrides: Any) -> None:
        """Start the bridge with the soak's settings and `overrides`; returns once it serves.

        Raises:
            RuntimeError: it did not start within `WAIT_S`.
        """
        self.running = self.config(**overrides)
        path = self.root / f"bridge.{len(self.logs)}.toml"
        path.write_text("".join(f"{k} = {json.dumps(v)}\n" for k, v in self.running.items()))
        log = self.root / f"bridge.{len(self.logs)}.log"
        self.logs.append(log)
        argv = [PY, "-m", "ftwbridge", "serve", "--config", str(path), "--exit-with-parent"]
        self.proc = await self.children.open(argv, log)
        line = await first_line(self.proc)
        if not line.startswith("ftwbridge serving"):
            raise RuntimeError(f"the bridge said {line!r}")

    async def stop(self, sig: int = signal.SIGTERM) -> tuple[int | None, float]:
        """Send `sig` and wait for the exit (the drain's `drain_s` plus `STOP_S` at most);
        returns (exit status or None if it did not exit, seconds taken)."""
        assert self.proc is not None
        started = trio.current_time()
        _signal(self.proc, sig)
        with trio.move_on_after(float(self.running.get("drain_s", 10)) + STOP_S):
            await self.proc.wait()
        return self.proc.returncode, trio.current_time() - started

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return int(self.proc.pid)

    def fds(self) -> int:
        """Descriptors the bridge holds open now."""
        return len(os.listdir(f"/proc/{self.pid}/fd"))

    def rss_bytes(self) -> int:
        """The bridge's resident memory now (bytes)."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        return 0

    async def metrics(self) -> Sample:
        """Read `/metrics` on a connection of its own, closed after.

        Raises:
            OSError, RuntimeError: the admin listener did not answer whole.
        """
        with trio.fail_after(WAIT_S):
            stream = await trio.open_tcp_stream("127.0.0.1", self.admin_port)
            async with stream:
                head = f"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:{self.admin_port}\r\n"
                await stream.send_all((head + "Connection: close\r\n\r\n").encode())
                data = b""
                while chunk := await stream.receive_some(65536):
                    data += chunk
        head_bytes, _, body = data.partition(b"\r\n\r\n")
        if not head_bytes.startswith(b"HTTP/1.1 200"):
            raise RuntimeError(f"/metrics answered {head_bytes[:80]!r}")
        return parse_metrics(body.decode())

    def log_lines(self, marks: dict[Path, int]) -> list[str]:
        """The log lines written since `marks` (file -> offset), every process of the bridge."""
        lines: list[str] = []
        for log in self.logs:
            data = log.read_bytes()[marks.get(log, 0) :]
            lines += data.decode(errors="replace").splitlines()
        return lines

    def log_marks(self) -> dict[Path, int]:
        """Where each log file ends now."""
        return {log: log.stat().st_size for log in self.logs if log.exists()}


@dataclass
class StubProc:
    """One stub process: a home of its own, or a fleet of `fleet` homes (`--fleet`)."""

    name: str
    fleet: int = 1
    extra: tuple[str, ...] = ()
    proc: trio.Process | None = None
    console: int = 0
    starts: int = 0

    @property
    def homes(self) -> list[str]:
        """The home ids it runs (a fleet's are `name-0` .. `name-(N-1)`)."""
        return [self.name] if self.fleet <= 1 else [f"{self.name}-{i}" for i in range(self.fleet)]

    async def start(self, children: Children, root: Path, door_url: str, state: Path) -> None:
        """Start it (again): same homes, same keys (seeded by the home ids), same `--state`.

        Raises:
            RuntimeError: it printed no start line within `WAIT_S`.
        """
        argv = [PY, "-m", "stubbox", "--bridge", door_url, "--home", self.name]
        argv += ["--seed", self.name, "--exit-with-parent", *self.extra]
        if self.fleet > 1:
            argv += ["--fleet", str(self.fleet)]
        argv += ["--state", str(state)]
        self.proc = await children.open(argv, root / f"stub.{self.name}.log")
        self.console = int(json.loads(await first_line(self.proc))["console"])
        self.starts += 1

    def signal(self, sig: int) -> None:
        """Send `sig` (SIGKILL, SIGSTOP, SIGCONT) to the stub's process."""
        assert self.proc is not None
        _signal(self.proc, sig)

    async def console_do(self, home: str, command: dict[str, Any]) -> Any:
        """One owner command at the console for `home`; returns its `ok` value.

        Raises:
            RuntimeError: the console answered with an error.
        """
        with trio.fail_after(WAIT_S):
            try:
                return await console(self.console, {"home": home, **command})
            except RuntimeError as exc:
                raise RuntimeError(f"console of {home}: {exc}") from None
