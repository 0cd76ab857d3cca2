"""A cluster on loopback for the tests of this folder: one throwaway
PostgreSQL, one keys process, three `ftwbridge serve` instances on that database with their
internal listeners and one `mesh_key`, and stub homes dialing their doors in turn.

Everything is a real process started with `subprocess`, once per test module (module-scoped
fixtures: the processes outlive one test's trio run), and stopped at the module's end. Every
wait is bounded (`BOUND_S`); each process's output goes to a file in the module's folder.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import pytest

from cluster.ca import ClusterCA
from devtools.rig import free_port as free_port
from devtools.rig import free_ports as free_ports
from tests.store.pgserver import PgServer

BOUND_S = 60.0
"""Bound on each process's start and each setup step, seconds (a loaded 2-core machine)."""
PORT_TRIES = 3
"""Starts of an instance whose port another process took meanwhile, each on new ports."""


class StartFailed(AssertionError):
    """A child exited before its first line; the message has its status and stderr's end."""

    def __init__(self, message: str, *, port_taken: bool) -> None:
        super().__init__(message)
        self.port_taken = port_taken


FROZEN_MS = 1_800_000_000_000
"""The stub homes' frozen clock: the same reads give the same answers, whichever way."""


@dataclass
class Instance:
    """One `ftwbridge serve`: its id, main, internal, admin and door ports, and its process."""

    name: str
    port: int
    internal_port: int
    admin_port: int
    door_port: int = 0
    """The door's own listener (`door_bind`), which the homes dial; 0: the kernel picks."""
    proc: subprocess.Popen[bytes] | None = None
    tls: dict[str, str] = field(default_factory=dict)
    """Its internal listener's TLS settings (`ClusterCA.settings`), or none: plain HTTP."""

    @property
    def mcp(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    @property
    def door(self) -> str:
        return f"ws://127.0.0.1:{self.door_port}/v1/box"

    @property
    def internal(self) -> str:
        scheme = "https" if self.tls else "http"
        return f"{scheme}://127.0.0.1:{self.internal_port}/mcp"

    @property
    def admin(self) -> str:
        return f"http://127.0.0.1:{self.admin_port}"


@dataclass
class Home:
    """A stub home: its id, console port and process."""

    name: str
    console: int
    proc: subprocess.Popen[bytes]


@dataclass
class Cluster:
    """The running cluster: `instances` by id, `homes` by id, tokens by agent id, and the
    settings every instance shares (`env`, `mesh_key`)."""

    folder: Path
    env: dict[str, str]
    mesh_key: bytes
    db_url: str
    instances: dict[str, Instance] = field(default_factory=dict)
    homes: dict[str, Home] = field(default_factory=dict)
    tokens: dict[str, str] = field(default_factory=dict)
    agent_keys: dict[str, str] = field(default_factory=dict)
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    cafile: Path | None = None
    """The cluster CA's certificate when the internal listeners serve TLS."""

    def ftwbridge(self, *args: str) -> str:
        """Run `python -m ftwbridge ARGS` to its end; its standard output (status 0 asserted)."""
        done = subprocess.run(
            [sys.executable, "-m", "ftwbridge", *args],
            env=self.env,
            capture_output=True,
            timeout=BOUND_S,
            check=False,
        )
        assert done.returncode == 0, done
        return done.stdout.decode()

    def start(self, argv: list[str], log: str, env: dict[str, str] | None = None) -> Any:
        """Start a child with a pipe on its standard input (it exits with us) and return it
        with its first line of output; its standard error goes to `log` in the folder."""
        err: IO[bytes] = open(self.folder / log, "ab")  # noqa: SIM115 (the child holds it)
        proc = subprocess.Popen(
            argv,
            env=env or self.env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
        )
        err.close()
        self.procs.append(proc)
        assert proc.stdout is not None
        os.set_blocking(proc.stdout.fileno(), True)
        try:
            line = _line(proc, self.folder / log)
        except StartFailed:
            if proc.poll() is not None:  # it has exited: nothing more to read or write
                self.procs.remove(proc)
                proc.stdin.close()  # type: ignore[union-attr]
                proc.stdout.close()
            raise
        return proc, line

    def start_instance(self, inst: Instance) -> None:
        """Start instance `inst` and wait for its banner. Its ports were free when chosen, but
        another process (a test on another worker, an outgoing connection) may have taken one
        since: `serve` then exits with status 2 saying so, and it is started again on new
        ports, at most `PORT_TRIES` times.

        Raises:
            StartFailed: it exited before its banner (its status and stderr in the message).
        """
        for attempt in range(1, PORT_TRIES + 1):
            env = dict(self.env)
            env.update(
                FTWBRIDGE_INSTANCE_ID=inst.name,
                FTWBRIDGE_BIND=f"127.0.0.1:{inst.port}",
                FTWBRIDGE_INTERNAL_BIND=f"127.0.0.1:{inst.internal_port}",
                FTWBRIDGE_ADMIN_BIND=f"127.0.0.1:{inst.admin_port}",
                FTWBRIDGE_DOOR_BIND=f"127.0.0.1:{inst.door_port}",
                FTWBRIDGE_STATE_DIR=str(self.folder / inst.name),
            )
            env.update({f"FTWBRIDGE_{k.upper()}": v for k, v in inst.tls.items()})
            argv = [sys.executable, "-m", "ftwbridge", "serve", "--exit-with-parent"]
            try:
                inst.proc, line = self.start(argv, f"{inst.name}.log", env)
            except StartFailed as exc:
                if not exc.port_taken or attempt == PORT_TRIES:
                    raise
                inst.port, inst.internal_port, inst.admin_port, inst.door_port = free_ports(4)
                continue
            assert line.startswith("ftwbridge serving "), line
            return

    def start_home(self, name: str, doors: list[Instance], *extra: str) -> Home:
        """Start a stub home dialing `doors` in turn (the first one first)."""
        urls = ",".join(i.door for i in doors)
        argv = [sys.executable, "-m", "stubbox", "--bridge", urls, "--home", name]
        argv += ["--seed", name, "--frozen-ms", str(FROZEN_MS), "--exit-with-parent", *extra]
        proc, line = self.start(argv, f"{name}.log")
        home = self.homes[name] = Home(name, json.loads(line)["console"], proc)
        return home


def _line(proc: subprocess.Popen[bytes], log: Path) -> str:
    """The child's first line of output, within `BOUND_S`.

    Raises:
        StartFailed: it exited first, or printed nothing in time; the message has its exit
            status and the end of `log`, its standard error.
    """
    assert proc.stdout is not None
    deadline = time.monotonic() + BOUND_S
    buf = b""
    while b"\n" not in buf:
        import select

        left = deadline - time.monotonic()
        if left <= 0:
            raise StartFailed(f"{proc.args} did not start in time{_said(log)}", port_taken=False)
        ready, _, _ = select.select([proc.stdout], [], [], left)
        if ready:
            chunk = os.read(proc.stdout.fileno(), 4096)
            if not chunk:
                status = proc.wait(timeout=BOUND_S)
                said = _said(log)
                raise StartFailed(
                    f"{proc.args} exited with status {status} before it started{said}",
                    port_taken=status == 2 and "in use" in said,
                )
            buf += chunk
    return buf.split(b"\n", 1)[0].decode()


def _said(log: Path) -> str:
    """The last lines of a child's standard error (`log`), for a failure's message."""
    try:
        lines = log.read_text(errors="replace").splitlines()[-15:]
    except OSError as exc:
        return f"; its stderr ({log}) cannot be read: {exc}"
    return f"; its stderr ({log}) ends:\n" + "\n".join(lines)


def console(port: int, command: dict[str, Any]) -> Any:
    """One command to a stub home's owner console; its `ok` value."""
    with socket.create_connection(("127.0.0.1", port), timeout=BOUND_S) as s:
        s.sendall(json.dumps(command).encode() + b"\n")
        buf = b""
        while not buf.endswith(b"\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
    answer = json.loads(buf)
    assert "error" not in answer, answer
    return answer["ok"]


def grant(cluster: Cluster, home: str, agent: str) -> None:
    """Make an agent key for `home`, have its owner list it, and mint its token (the CLI
    reads the roster from PostgreSQL, which the holder writes soon after the box sent it)."""
    key = cluster.agent_keys[agent] = cluster.ftwbridge("agent", "create", "--home", home).strip()
    row = {
        "op": "put_agent",
        "key": key,
        "id": agent,
        "client": "test",
        "name": agent,
        "scopes": ["ftw.live.read", "ftw.plan.read"],
        "ops": [],
        "caps": {},
        "expiresAtMs": 10**13,
    }
    console(cluster.homes[home].console, row)
    argv = ["token", "issue", "--home", home, "--agent", agent, "--wait", str(BOUND_S)]
    done = subprocess.run(  # waits for the roster to reach the database (its event)
        [sys.executable, "-m", "ftwbridge", *argv],
        env=cluster.env,
        capture_output=True,
        timeout=BOUND_S + 30,
        check=False,
    )
    assert done.returncode == 0, done
    cluster.tokens[agent] = done.stdout.decode().strip()


@contextlib.contextmanager
def running_cluster(
    pg: PgServer, folder: Path, settings: dict[str, str] | None = None, *, tls: bool = False
) -> Iterator[Cluster]:
    """Three instances b-1, b-2, b-3 on one new database of `pg`, one keys service (TCP, keys
    sealed under its kek), and the home `h1` dialing b-1 first (then b-2, b-3), with agents `a1` and `a2` granted and their
    tokens minted; every process is stopped at the end (SIGTERM, then SIGKILL after 10 s).
    `settings`: more `FTWBRIDGE_*` variables for every process (a benchmark's limits); `tls`:
    the internal listeners serve TLS with certificates of a cluster CA made in `folder/tls`,
    and forward only over it (`Cluster.cafile`)."""
    key = secrets.token_bytes(32)
    db_url = pg.create_database()
    picked = free_ports(12)
    ports = [tuple(picked[i : i + 4]) for i in (0, 4, 8)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("FTWBRIDGE_")}
    env.update(
        FTWBRIDGE_DATABASE_URL=db_url,
        FTWBRIDGE_MESH_KEY=key.hex(),
        FTWBRIDGE_PUBLIC_URL=f"http://127.0.0.1:{ports[0][0]}",
        FTWBRIDGE_STATE_DIR=str(folder / "cli"),
        FTWBRIDGE_LOG_LEVEL="info",
    )
    env.update(settings or {})
    made = Cluster(folder, env, key, db_url)
    ca = ClusterCA(folder / "tls") if tls else None
    made.cafile = None if ca is None else ca.cafile
    if made.cafile is not None:  # every process speaks TLS to the others (the CLI too)
        made.env["FTWBRIDGE_MESH_CAFILE"] = str(made.cafile)
    try:
        made.ftwbridge("db", "migrate")
        # one keys service on TCP, agents' keys sealed in the database under its own kek
        keys_env = dict(
            env, FTWBRIDGE_STATE_DIR=str(folder / "keys"), FTWBRIDGE_KEK=secrets.token_hex(32)
        )
        if ca is not None:  # the keys channel over TLS too; every instance verifies it
            leaf = ca.leaf("keys")
            keys_env |= {
                "FTWBRIDGE_INTERNAL_CERTFILE": str(leaf.certfile),
                "FTWBRIDGE_INTERNAL_KEYFILE": str(leaf.keyfile),
            }
        # on a port it picks itself: no other process can take it between choice and bind
        argv = [sys.executable, "-m", "ftwbridge", "keys", "--listen", "127.0.0.1:0"]
        _proc, line = made.start(argv, "keys.log", keys_env)
        assert line.startswith("keys service on "), line
        made.env["FTWBRIDGE_KEYS_URL"] = line.removeprefix("keys service on ").strip()
        for n, (port, internal, admin, door) in enumerate(ports, 1):
            made.instances[f"b-{n}"] = inst = Instance(f"b-{n}", port, internal, admin, door)
            if ca is not None:
                inst.tls = ca.settings(inst.name)
            made.start_instance(inst)
        b1, b2, b3 = made.instances.values()
        printed = subprocess.run(
            [sys.executable, "-m", "stubbox", "--home", "h1", "--seed", "h1", "--print-key"],
            capture_output=True,
            timeout=BOUND_S,
            check=True,
        )
        made.ftwbridge(
            "home", "enroll", "--home", "h1", "--key", json.loads(printed.stdout)["homeKey"]
        )
        made.start_home("h1", [b1, b2, b3])
        grant(made, "h1", "a1")
        grant(made, "h1", "a2")
        yield made
    finally:
        for proc in reversed(made.procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in made.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if proc.stdin is not None:
                proc.stdin.close()
            if proc.stdout is not None:
                proc.stdout.close()


@pytest.fixture(scope="module")
def cluster(pg_server: PgServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """`running_cluster` for one test module."""
    with running_cluster(pg_server, tmp_path_factory.mktemp("cluster")) as made:
        yield made
