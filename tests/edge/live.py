"""A real bridge process for the edge tests, and raw-socket helpers as an attacker writes them.

`LiveBridge.start(tmp)` runs the operator's flow from the README with real processes: the stub
home prints its key, `ftwbridge home enroll`, `ftwbridge serve` (main and admin listeners on
ports the kernel picks, and the door's own listener), the stub home dials the door, `ftwbridge agent create`, the owner's
`put_agent` at the home's console, `ftwbridge token issue`. Everything here is synchronous
(plain sockets), so a crash of the bridge shows as its process gone.
"""

from __future__ import annotations

import json
import select
import socket
import struct
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cbor2

from devtools.rig import free_port as free_port
from ftwbridge.proto.registry import READ_SCOPES

HOME = "edge-home"
AGENTS = 5
"""Agents granted at the home: four take turns in the checks, the last runs the demo session."""
WAIT_S = 30.0
"""Bound on every wait for a process or socket here; generous for a loaded 2-core machine."""

WS_UPGRADE = (
    "GET {path} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
)


def read_close_code(
    sock: socket.socket, already: bytes = b"", timeout_s: float = WAIT_S
) -> int | None:
    """Read server frames until a Close frame (returns its code, 1005 when it has none) or
    until the server ends the connection without one (None)."""
    sock.settimeout(timeout_s)
    data = already
    while True:
        code = close_code(data)
        if code is not None:
            return code
        try:
            chunk = sock.recv(65536)
        except (TimeoutError, ConnectionResetError):
            return None
        if not chunk:
            return None
        data += chunk


def read_until_closed(sock: socket.socket, timeout_s: float = 10.0) -> bytes:
    """Everything the server sends until it closes (or `timeout_s` passes, or it resets)."""
    sock.settimeout(timeout_s)
    out = b""
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            chunk = sock.recv(65536)
            if not chunk:
                break
            out += chunk
    except (TimeoutError, ConnectionResetError):
        pass
    return out


def close_code(rest: bytes) -> int | None:
    """The code of the first whole server Close frame in `rest` (bytes after the 101), if any."""
    while len(rest) >= 2:
        opcode, n = rest[0] & 0x0F, rest[1] & 0x7F
        off = 2
        if n == 126:
            n, off = struct.unpack("!H", rest[2:4])[0], 4
        elif n == 127:
            n, off = struct.unpack("!Q", rest[2:10])[0], 10
        payload = rest[off : off + n]
        if len(payload) < n:
            return None
        if opcode == 0x8:
            return int(struct.unpack("!H", payload[:2])[0]) if len(payload) >= 2 else 1005
        rest = rest[off + n :]
    return None


@dataclass
class LiveBridge:
    """`ftwbridge serve` and one stub home, each in its own process."""

    tmp: Path
    url: str = ""
    admin_url: str = ""
    door_port: int = 0
    """The door's own listener (`door_bind`), which the home dials."""
    tokens: list[str] = field(default_factory=list)
    _checks: int = 0
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    logs: list[Any] = field(default_factory=list)

    @property
    def main(self) -> tuple[str, int]:
        host, port = self.url.split("//")[1].split("/")[0].rsplit(":", 1)
        return host, int(port)

    @property
    def admin(self) -> tuple[str, int]:
        host, port = self.admin_url.split("//")[1].rsplit(":", 1)
        return host, int(port)

    def _cli(self, *args: str) -> str:
        out = subprocess.run(
            [sys.executable, "-m", "ftwbridge", *args, "--config", str(self.tmp / "bridge.toml")],
            capture_output=True,
            text=True,
            timeout=WAIT_S,
            check=True,
        )
        return out.stdout.strip()

    def _spawn(self, *argv: str) -> tuple[subprocess.Popen[bytes], str]:
        log = open(self.tmp / f"{argv[1]}.{len(self.procs)}.err", "wb")  # noqa: SIM115
        self.logs.append(log)
        proc = subprocess.Popen([sys.executable, *argv], stdout=subprocess.PIPE, stderr=log)
        self.procs.append(proc)
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], WAIT_S)
        assert ready, f"{argv[1]} printed nothing in {WAIT_S} s"
        return proc, proc.stdout.readline().decode()

    @classmethod
    def start(cls, tmp: Path, **settings: Any) -> LiveBridge:
        """Start the bridge and the home, grant one agent, and mint its token."""
        live = cls(tmp)
        port, admin_port = free_port(), free_port()  # a token's audience names the port
        live.door_port = free_port()
        config = {
            "bind": f"127.0.0.1:{port}",
            "door_bind": f"127.0.0.1:{live.door_port}",
            "door_handshake_s": 3.0,
            "public_url": f"http://127.0.0.1:{port}",
            "admin_bind": f"127.0.0.1:{admin_port}",
            "state_dir": str(tmp / "state"),
            # the corpus checks the bridge after every case: pacing must not be what answers
            "pace_calls_burst": 10_000,
            "pace_calls_per_s": 10_000,
            "http_burst": 10_000,
            "http_per_s": 10_000,
        } | settings
        (tmp / "bridge.toml").write_text(
            "".join(f"{k} = {json.dumps(v)}\n" for k, v in config.items())
        )
        key = json.loads(
            subprocess.run(
                [sys.executable, "-m", "stubbox", "--home", HOME, "--seed", HOME, "--print-key"],
                capture_output=True,
                timeout=WAIT_S,
                check=True,
            ).stdout
        )["homeKey"]
        live._cli("home", "enroll", "--home", HOME, "--key", key)
        proc, line = live._spawn("-m", "ftwbridge", "serve", "--config", str(tmp / "bridge.toml"))
        live.url = line.split()[-1]
        live.admin_url = proc.stdout.readline().decode().split()[-1]  # type: ignore[union-attr]
        door = f"ws://127.0.0.1:{live.door_port}/v1/box"
        _, line = live._spawn("-m", "stubbox", "--bridge", door, "--home", HOME, "--seed", HOME)
        console_port = json.loads(line)["console"]
        for n in range(AGENTS):
            grant = {
                "op": "put_agent",
                "home": HOME,
                "key": live._cli("agent", "create", "--home", HOME),
                "id": f"edge-agent-{n}",
                "name": f"Edge test assistant {n}",
                "scopes": sorted(s.value for s in READ_SCOPES),
                "expiresAtMs": int(time.time() * 1000) + 86_400_000,
            }
            with socket.create_connection(("127.0.0.1", console_port), timeout=WAIT_S) as c:
                c.sendall(json.dumps(grant).encode() + b"\n")
                assert b'"ok"' in c.recv(65536)
        for n in range(AGENTS):  # the roster travels box -> door -> store: `--wait` for it
            agent = f"edge-agent-{n}"
            live.tokens.append(
                live._cli("token", "issue", "--home", HOME, "--agent", agent, "--wait", str(WAIT_S))
            )
        return live

    @property
    def token(self) -> str:
        """The last agent's token, kept for the demo session (its read budget untouched)."""
        return self.tokens[-1]

    def _check_token(self) -> str:
        """The next of the other agents' tokens: the box serves each agent 60 reads a minute
        (agents.yaml `reads_per_min`), and the corpus checks the bridge after every case."""
        self._checks += 1
        return self.tokens[self._checks % (AGENTS - 1)]

    def stop(self) -> None:
        """Stop every process (SIGTERM, then SIGKILL after the bound)."""
        for proc in reversed(self.procs):
            proc.terminate()
        for proc in reversed(self.procs):
            try:
                proc.wait(WAIT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
        for log in self.logs:
            log.close()

    @property
    def alive(self) -> bool:
        """Whether the bridge process still runs."""
        return self.procs[0].poll() is None

    @property
    def door(self) -> tuple[str, int]:
        return "127.0.0.1", self.door_port

    def connect(self, *, admin: bool = False, door: bool = False) -> socket.socket:
        """A fresh TCP connection to the main (or admin, or the door's own) listener."""
        where = self.door if door else self.admin if admin else self.main
        return socket.create_connection(where, timeout=WAIT_S)

    def upgrade(self) -> tuple[socket.socket, bytes]:
        """A WebSocket connection to the door's own listener (the only one that speaks it)
        after the 101, and what came after the 101's head."""
        sock = self.connect(door=True)
        host, port = self.door
        sock.sendall(WS_UPGRADE.format(path="/v1/box", host=f"{host}:{port}").encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = sock.recv(4096)
            assert chunk, head
            head += chunk
        assert head.startswith(b"HTTP/1.1 101 "), head[:100]
        return sock, head.partition(b"\r\n\r\n")[2]

    def mcp_status(self) -> dict[str, Any]:
        """A normal `tools/call status` with an agent's token; returns the JSON-RPC answer."""
        body = json.dumps(
            {
                "jsonrpc": "2.0",
                "id": 7,
                "method": "tools/call",
                "params": {"name": "status", "arguments": {}},
            }
        ).encode()
        host, port = self.main
        request = (
            f"POST /mcp HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer {self._check_token()}\r\n"
            "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        ).encode() + body
        with self.connect() as sock:
            sock.sendall(request)
            data = read_until_closed(sock, WAIT_S)
        head, _, payload = data.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200"), data[:300]
        answer: dict[str, Any] = json.loads(payload)
        return answer

    def door_challenge(self) -> dict[str, Any]:
        """Open a fresh uplink at the door's own listener and read the door's first message
        (`door.challenge`)."""
        sock, data = self.upgrade()
        with sock:
            sock.settimeout(WAIT_S)
            while len(data) < 2 or len(data) < 2 + (data[1] & 0x7F):
                chunk = sock.recv(4096)
                assert chunk, "the door closed before its challenge"
                data += chunk
            assert data[0] == 0x82 and (data[1] & 0x7F) < 126, data[:4]
            envelope: dict[str, Any] = cbor2.loads(data[2 : 2 + (data[1] & 0x7F)])
            return envelope

    def assert_serving(self) -> None:
        """The bridge process is up, a normal `/mcp` call reads the home through the existing
        uplink, and a new uplink is challenged by the door."""
        assert self.alive, "the bridge process has stopped"
        answer = self.mcp_status()
        assert "result" in answer and not answer["result"].get("isError"), answer
        assert self.door_challenge()["t"] == "door.challenge"

    def metrics(self) -> str:
        """The admin listener's `/metrics` text."""
        host, port = self.admin
        with self.connect(admin=True) as sock:
            sock.sendall(
                f"GET /metrics HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n\r\n".encode()
            )
            return read_until_closed(sock, WAIT_S).decode()
