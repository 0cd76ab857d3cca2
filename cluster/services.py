"""The cluster's services, each started by `cluster.procs.start_child`: a throwaway PostgreSQL,
the keys service, the bridge instances and HAProxy in front of them.

PostgreSQL comes from Debian's `postgresql` (`make postgres`): `initdb` and `postgres` in a
folder of the run's own, as the `postgres` user when this runs as root (PostgreSQL refuses
root; `setpriv`, which executes the server itself, so the process is PostgreSQL's), durability
off since the data is thrown away. HAProxy is Debian's `haproxy` (`make haproxy`), in the
foreground (`-db`) with a configuration written into the run's folder.
"""

from __future__ import annotations

import math
import os
import shutil
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from ftwbridge.config import Config
from ftwbridge.mcp.tools import TOOLS

from .affinity import MAP_FILE, affinity_lines, balance
from .procs import PY, CannotStart, Child, free_port, start_child, wait_port

PG_READY = "database system is ready to accept connections"
"""The line PostgreSQL logs once it takes connections."""
NO_POSTGRES = (
    "PostgreSQL is not installed here (no initdb and postgres on PATH or in"
    " /usr/lib/postgresql): `make postgres` installs Debian's postgresql"
)
NO_HAPROXY = "HAProxy is not installed here: `make haproxy` installs Debian's haproxy"


def _lifeline(argv: list[str], stop: str = "SIGTERM") -> list[str]:
    return [PY, "-m", "cluster.lifeline", "--stop", stop, "--", *argv]


def _as_postgres(argv: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return argv
    return ["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups", *argv]


@dataclass
class Postgres:
    """A throwaway PostgreSQL: its `port`, `folder` (data in `folder/data`) and the running
    `child` (None while stopped)."""

    bindir: Path
    folder: Path
    port: int
    child: Child | None = None

    @property
    def url(self) -> str:
        """The URL of the cluster's database."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    @classmethod
    async def init(cls, root: Path, port: int) -> Postgres:
        """`initdb` a cluster in `root/pg` (made the `postgres` user's when running as root).

        Raises:
            CannotStart: PostgreSQL is not installed, or initdb failed (its last line said).
        """
        from tests.store.pgserver import postgres_bin  # the store tests' finder, shared

        bindir = postgres_bin()
        if bindir is None or not (bindir / "postgres").exists():
            raise CannotStart(NO_POSTGRES)
        folder = root / "pg"
        folder.mkdir()
        if os.geteuid() == 0:
            shutil.chown(root, "postgres", "postgres")  # a temporary folder is 0700 root's
            shutil.chown(folder, "postgres", "postgres")
        argv = [str(bindir / "initdb"), "-D", str(folder / "data"), "-U", "postgres"]
        argv += ["--auth=trust", "--no-sync", "--encoding=UTF8", "--locale=C"]
        done = await trio.run_process(
            _as_postgres(argv), capture_stdout=True, capture_stderr=True, check=False
        )
        if done.returncode != 0:
            said = (done.stderr or done.stdout).decode(errors="replace").strip().splitlines()
            raise CannotStart(f"initdb failed: {said[-1] if said else done.returncode}")
        return cls(bindir, folder, port)

    async def start(self, nursery: trio.Nursery) -> None:
        """Start the server (again, on the same port and data) in `nursery`; returns once it
        takes connections.

        Raises:
            CannotStart: it exited or did not say it was ready within `procs.WAIT_S`.
        """
        argv = [str(self.bindir / "postgres"), "-D", str(self.folder / "data")]
        argv += ["-p", str(self.port), "-k", str(self.folder)]
        for option in (
            "listen_addresses=127.0.0.1",
            "fsync=off",
            "synchronous_commit=off",
            "full_page_writes=off",
            "max_connections=300",
        ):
            argv += ["-c", option]
        self.child = await start_child(
            nursery,
            "PostgreSQL",
            _lifeline(_as_postgres(argv), "SIGINT"),
            self.folder.parent / "postgres.log",
            ready=PG_READY,
        )

    async def stop(self) -> None:
        """Fast shutdown (SIGINT: sessions are ended, what was committed stays); returns once
        the server is gone."""
        if self.child is not None:
            self.child.signal(signal.SIGINT)
            await self.child.proc.wait()
            self.child = None


@dataclass
class Instance:
    """One `ftwbridge serve`: its `name` (the instance id), ports and config file."""

    name: str
    root: Path
    port: int
    admin_port: int
    internal_port: int
    settings: dict[str, Any]
    prefix: list[str] = field(default_factory=list)
    """What goes before its command (`taskset -c N` in the bench)."""
    child: Child | None = None

    @property
    def url(self) -> str:
        """Its own `/mcp` (not through HAProxy)."""
        return f"http://127.0.0.1:{self.port}/mcp"

    @property
    def door_port(self) -> int:
        """The port of its door's own listener (`door_bind`, else that setting's default)."""
        bind = self.settings.get("door_bind") or Config.model_fields["door_bind"].default
        return int(str(bind).rsplit(":", 1)[1])

    @property
    def door_url(self) -> str:
        """Its own `/v1/box` (not through HAProxy): the door's own listener."""
        return f"ws://127.0.0.1:{self.door_port}/v1/box"

    @property
    def config_path(self) -> Path:
        return self.root / f"{self.name}.toml"

    def write_config(self) -> None:
        """Write its TOML settings file."""
        text = "".join(f"{k} = {_toml(v)}\n" for k, v in self.settings.items())
        self.config_path.write_text(text)

    async def start(self, nursery: trio.Nursery) -> None:
        """Start (or restart) it in `nursery`; returns once it serves. On its first start
        (before HAProxy's configuration names its ports), a port taken by another program
        between the pick and the bind has it start again on new ports (`PORT_TRIES` starts in
        all), each time with a line in its log saying so and where it now listens.

        Raises:
            CannotStart: it exited or did not serve within `procs.WAIT_S` (on a restart, or
                after `PORT_TRIES` starts, also for a port in use).
        """
        argv = [*self.prefix, PY, "-m", "ftwbridge", "serve", "--config", str(self.config_path)]
        first = self.child is None
        for attempt in range(1, PORT_TRIES + 1):
            try:
                self.child = await start_child(
                    nursery,
                    f"instance {self.name}",
                    [*argv, "--exit-with-parent"],
                    self.root / f"{self.name}.log",
                    ready="ftwbridge serving",
                )
                return
            except CannotStart as exc:
                # a port picked free and released was taken meanwhile by another program: on
                # a first start (before HAProxy's configuration names them) pick new ones
                if not (first and "the port is in use" in str(exc)) or attempt == PORT_TRIES:
                    raise
                self._new_ports()
                self._say(f"{exc}; starting it again on new ports ({self.ports_words()})")

    def ports_words(self) -> str:
        """Its listeners' addresses in words (`main 127.0.0.1:P, admin ..., ...`)."""
        return ", ".join(
            f"{what} {self.settings[key]}" for what, key in LISTENERS if self.settings.get(key)
        )

    def _say(self, line: str) -> None:
        """Add `line` to its log file, the one a failure's sentence names."""
        with (self.root / f"{self.name}.log").open("a") as log:
            log.write(f"cluster: {line}\n")

    def _new_ports(self) -> None:
        """Pick new free ports for the listeners its settings name and write its settings
        file again."""
        self.port, self.admin_port, self.internal_port = free_port(), free_port(), free_port()
        picked = {"bind": self.port, "admin_bind": self.admin_port}
        picked["internal_bind"] = self.internal_port
        for _what, key in LISTENERS:
            if self.settings.get(key):
                self.settings[key] = f"127.0.0.1:{picked.get(key) or free_port()}"
        url = str(self.settings.get("internal_url", ""))
        if url:  # where the others forward to: the new internal port (same scheme)
            self.settings["internal_url"] = (
                f"{url.split('://')[0]}://127.0.0.1:{self.internal_port}"
            )
        self.write_config()


LISTENERS = (
    ("main", "bind"),
    ("admin", "admin_bind"),
    ("internal", "internal_bind"),
    ("door", "door_bind"),
)
"""An instance's listeners (words, setting), each on a port of its own."""


PORT_TRIES = 3
"""Starts of one instance on new ports when a port it was given is taken before it binds."""


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


KEYS_SERVICES = 2
"""Keys services `make cluster` runs: one would be a single point of failure for every
instance (no new session anywhere while it is down); each instance's `keys_url` lists all."""


async def start_keys(
    nursery: trio.Nursery, root: Path, database_url: str, settings: dict[str, Any]
) -> tuple[list[Child], dict[str, Any]]:
    """Start the keys services (`ftwbridge keys --listen`, one on each port of
    `settings["keys_ports"]`, agents' keys sealed in the one database under `kek`; over TLS
    with a certificate of `settings["ca"]`, the cluster CA, when there is one); returns
    them and the settings an instance needs to reach them (`keys_url` naming every one, in
    order, and `mesh_key`).

    Raises:
        CannotStart: one did not start within `procs.WAIT_S`.
    """
    ports = settings.pop("keys_ports")
    ca = settings.get("ca")
    children = []
    for n, port in enumerate(ports, 1):
        path = root / f"keys{n}.toml"
        keys_settings: dict[str, Any] = {
            "state_dir": str(root / f"keys{n}"),
            "log_level": "info",
            "database_url": database_url,
            "mesh_key": settings["mesh_key"],
            "kek": settings["kek"],
        }
        if ca is not None:
            leaf = ca.leaf(f"keys{n}")
            keys_settings |= {
                "internal_certfile": str(leaf.certfile),
                "internal_keyfile": str(leaf.keyfile),
            }
        path.write_text("".join(f"{k} = {_toml(v)}\n" for k, v in keys_settings.items()))
        where = ["--listen", f"127.0.0.1:{port}"]
        # `ftwbridge keys` has no --exit-with-parent: the lifeline stops it when this run ends
        argv = _lifeline([PY, "-m", "ftwbridge", "keys", "--config", str(path), *where])
        log = root / f"keys{n}.log"
        children.append(
            await start_child(nursery, f"keys service {n}", argv, log, ready="keys service on")
        )
    urls = ",".join(f"tcp://127.0.0.1:{port}" for port in ports)
    return children, {"keys_url": urls, "mesh_key": settings["mesh_key"]}


HAPROXY_CFG = """\
global
    maxconn 4096
    # a reload (SIGUSR2 to the master, `reload_haproxy`) hands the listening sockets to the
    # new worker, so no connection is refused; the old worker finishes its calls (each within
    # call_deadline_s) and closes idle connections spread over close-spread-time, and is
    # stopped at hard-stop-after (uplinks still on it then redial)
    stats socket {root}/haproxy.sock mode 600 level admin expose-fd listeners
    hard-stop-after {hard_stop_s}s
    close-spread-time 5s

defaults
    mode http
    log stdout format raw local0
    option httplog
    option dontlognull
    # the client's address for the instances' per-address limits (their trusted_proxies)
    option forwardfor
    timeout connect 2s
    timeout client 60s
    # an instance answers each call in words within call_deadline_s of its start: one that
    # does not by then is stopped or frozen, and the call gets the 504 below in words
    timeout server {server_ms}ms
    timeout tunnel 1h
    timeout http-request 10s
    retries 2
    option redispatch
    default-server check inter 1s fall 2 rise 1
    errorfile 502 {root}/502.http
    errorfile 503 {root}/503.http
    errorfile 504 {root}/504.http

frontend public
    bind 127.0.0.1:{port}
    use_backend boxes if {{ path /v1/box }}
    default_backend bridges

backend bridges
    balance {calls}
    # a new connection to the instance for each request: HAProxy 2.6 keeps an idle server
    # connection with no time bound, and one the instance closes after its keep_alive_s as a
    # request crosses the close loses that request (docs/operations.md, "Keep-alive behind a
    # proxy")
    option http-server-close
    # sent again elsewhere: a request no instance took (the default), and one an instance
    # ended with no answer when repeating it changes nothing: a read (below). HAProxy keeps
    # a request to send again only when it has the whole of it before it sends any
    option http-buffer-request
    retry-on conn-failure empty-response
    acl mcp path /mcp
    acl listing req.hdr(mcp-method) -m str tools/list server/discover
    acl tool_call req.hdr(mcp-method) -m str tools/call
    acl read_tool req.hdr(mcp-name) -m str {read_tools}
    http-request disable-l7-retry unless mcp listing || mcp tool_call read_tool
{affinity}    option httpchk GET /readyz
    http-check expect status 200
{servers}

backend boxes
    # each instance's door listener (door_bind); its readiness is asked of its admin port
    balance {boxes}
    option httpchk GET /readyz
    http-check expect status 200
{box_servers}
"""

ERRORS = {
    502: ("Bad Gateway", "the bridge instance that took this request stopped answering"),
    503: ("Service Unavailable", "no bridge instance is ready now"),
    504: ("Gateway Timeout", "the bridge instance that took this request did not answer in time"),
}
"""HAProxy's own answers, in words and as a JSON-RPC error (what an MCP client reads)."""


HARD_STOP_SLACK_S = 5
"""Seconds past `call_deadline_s` that an old HAProxy worker lives after a reload."""


def write_haproxy(
    root: Path, port: int, instances: list[Instance], *, affinity: str = "learned"
) -> Path:
    """Write HAProxy's configuration (and its error answers) into `root`; returns its path.
    Boxes go to the instance with the fewest connections; a call goes to the instance that
    holds its home as HAProxy learned it (`affinity`: a mode of `cluster.affinity.MODES`),
    else round robin, and an instance forwards a call to its home's holder. HAProxy waits for an instance's
    answer as long as the instances' `call_deadline_s` (their longest; the default when
    they set none), counted from when it sent the request: an instance that has not
    answered by then is stopped or frozen, and the call gets HAProxy's 504 in words."""
    for status, (reason, words) in ERRORS.items():
        body = (
            '{"jsonrpc": "2.0", "id": null, "error": {"code": -32603, "message": "'
            + words
            + '; try again in a few seconds"}}\n'
        )
        head = (
            f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n"
            f"Retry-After: 2\r\nCache-Control: no-store\r\nConnection: close\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        )
        (root / f"{status}.http").write_text(head + body)
    servers = "\n".join(
        f"    server {i.name} 127.0.0.1:{i.port} check port {i.admin_port}" for i in instances
    )
    box_servers = "\n".join(
        f"    server {i.name} 127.0.0.1:{i.door_port} check port {i.admin_port}" for i in instances
    )
    default_s = Config.model_fields["call_deadline_s"].default
    deadline_s = max(float(i.settings.get("call_deadline_s", default_s)) for i in instances)
    text = HAPROXY_CFG.format(
        root=root,
        port=port,
        server_ms=round(deadline_s * 1000),
        hard_stop_s=math.ceil(deadline_s) + HARD_STOP_SLACK_S,
        servers=servers,
        box_servers=box_servers,
        calls=balance(affinity),
        affinity=affinity_lines(affinity, root / MAP_FILE, [i.name for i in instances]),
        boxes="leastconn",
        read_tools=" ".join(tool.name for tool in TOOLS),
    )
    (root / MAP_FILE).touch()
    path = root / "haproxy.cfg"
    path.write_text(text)
    return path


async def haproxy_command(root: Path, command: str) -> str:
    """Send one command to HAProxy's runtime API (its stats socket in `root`, e.g.
    `set server bridges/b1 state maint`); returns its answer ("" when it has none).

    Raises:
        OSError: HAProxy does not listen on its socket.
    """
    stream = await trio.open_unix_socket(str(root / "haproxy.sock"))
    async with stream:
        await stream.send_all(command.encode() + b"\n")
        answer = b""
        while chunk := await stream.receive_some(65536):
            answer += chunk
    return answer.decode(errors="replace").strip()


async def start_haproxy(nursery: trio.Nursery, root: Path, port: int, cfg: Path) -> Child:
    """Start HAProxy on `cfg` in master-worker mode (`-W`, in the foreground); returns once
    it takes connections on `port`. `reload_haproxy` reloads it without losing a call.

    Raises:
        CannotStart: it is not installed, or it exited or did not listen within `procs.WAIT_S`.
    """
    binary = shutil.which("haproxy")
    if binary is None:
        raise CannotStart(NO_HAPROXY)
    child = await start_child(
        nursery, "HAProxy", _lifeline([binary, "-W", "-db", "-f", str(cfg)]), root / "haproxy.log"
    )
    await wait_port(port, child)
    return child


def reload_haproxy(child: Child) -> None:
    """Reload HAProxy (`start_haproxy`'s child) on its configuration file as it is now: SIGUSR2
    to its master (through the lifeline), HAProxy's seamless reload. Never restart it instead:
    a stop cuts every call and uplink it carries, with no words."""
    child.signal(signal.SIGUSR2)
