"""Whatever starts a stub home stops it (docs/operations.md, "Child processes"): real processes, real signals.

The stub stops on SIGTERM in each state (dialling, backing off, answering) and at once on a
second signal; a stub whose parent dies by SIGKILL exits by itself (its standard input is the
lifeline); and the demo and the bench's bridge server leave no stub behind, stopped or killed.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BOUND_S = 20.0
"""Bound on every wait here: the stub's own stop takes at most 1 s; this holds on a loaded machine."""


def _children(pid: int) -> set[int]:
    """Every descendant of `pid` now (Linux /proc)."""
    out: set[int] = set()
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{p}/task")
        except FileNotFoundError:
            continue
        for tid in tasks:
            try:
                kids = Path(f"/proc/{p}/task/{tid}/children").read_text().split()
            except FileNotFoundError:
                continue
            for kid in map(int, kids):
                if kid not in out:
                    out.add(kid)
                    todo.append(kid)
    return out


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


def _wait_gone(pids: set[int], bound_s: float = BOUND_S) -> set[int]:
    """Wait until none of `pids` runs (zombies count as gone); returns those still running."""
    deadline = time.monotonic() + bound_s
    while time.monotonic() < deadline:
        left = {p for p in pids if _running(p)}
        if not left:
            return left
        time.sleep(0.05)  # other processes' exits: no event reaches this process
    return {p for p in pids if _running(p)}


def _line(proc: subprocess.Popen[bytes], bound_s: float = BOUND_S) -> bytes:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], bound_s)
    assert ready, "the process printed nothing"
    return proc.stdout.readline()


STARTED: list[subprocess.Popen[bytes]] = []


@pytest.fixture(autouse=True)
def _reap() -> Iterator[None]:
    """Whatever a test here started is killed at its end, even when the test failed early."""
    yield
    while STARTED:
        proc = STARTED.pop()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                pipe.close()


def _started(proc: subprocess.Popen[bytes]) -> subprocess.Popen[bytes]:
    STARTED.append(proc)
    return proc


def _stub(bridge: str, *extra: str) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "stubbox", "--bridge", bridge, "--home", "c", *extra],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        bufsize=0,  # unbuffered: select() on the pipe then sees every line
        stderr=subprocess.DEVNULL,
        cwd=ROOT,
    )
    json.loads(_line(_started(proc)))
    return proc


@pytest.fixture
def silent_listener() -> Iterator[str]:
    """A door that accepts TCP and never answers (a stalled bridge)."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        yield f"ws://127.0.0.1:{listener.getsockname()[1]}/v1/box"


def _closed_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"ws://127.0.0.1:{s.getsockname()[1]}/v1/box"


def _stop_and_time(proc: subprocess.Popen[bytes], *signals: int) -> float:
    start = time.monotonic()
    for sig in signals:
        proc.send_signal(sig)
    proc.wait(BOUND_S)
    took = time.monotonic() - start
    for pipe in (proc.stdin, proc.stdout):
        if pipe is not None:
            pipe.close()
    return took


@pytest.mark.parametrize("state", ["backing off", "dialling"])
@pytest.mark.parametrize("fleet", ["1", "16"])
def test_stub_stops_on_sigterm(state: str, fleet: str, silent_listener: str) -> None:
    door = _closed_port() if state == "backing off" else silent_listener
    proc = _stub(door, "--fleet", fleet)
    time.sleep(1.0)  # let it reach the state (dialling hangs; backing off sleeps)
    took = _stop_and_time(proc, signal.SIGTERM)
    assert proc.returncode == 0 and took < BOUND_S / 2, took


def test_stub_second_signal_exits_at_once(silent_listener: str) -> None:
    proc = _stub(silent_listener, "--fleet", "8")
    _stop_and_time(proc, signal.SIGTERM, signal.SIGTERM)
    assert proc.returncode in (0, 130)


def test_stub_exits_when_its_parent_is_killed(silent_listener: str) -> None:
    """The parent starts the stub as `devtools.rig.start_stub` does, then dies by SIGKILL."""
    code = (
        "import sys, trio\n"
        "from devtools.rig import start_stub\n"
        "async def main():\n"
        "    async with trio.open_nursery() as n:\n"
        "        proc, _ = await start_stub(n, sys.argv[1], home='p')\n"
        "        print(proc.pid, flush=True)\n"
        "        await trio.sleep_forever()\n"
        "trio.run(main)\n"
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", code, silent_listener],
        stdout=subprocess.PIPE,
        bufsize=0,  # unbuffered: select() on the pipe then sees every line
        cwd=ROOT,
    )
    stub_pid = int(_line(_started(parent)))
    assert _running(stub_pid)
    parent.kill()
    parent.wait(BOUND_S)
    assert parent.stdout is not None
    parent.stdout.close()
    assert _wait_gone({stub_pid}) == set(), "the stub outlived its killed parent"


@pytest.mark.parametrize("how", ["SIGINT", "SIGKILL"])
def test_the_demo_leaves_no_stub(how: str, tmp_path: Path) -> None:
    demo = subprocess.Popen(
        [sys.executable, "-m", "ftwbridge", "demo", "--port", "0", "--state-dir", str(tmp_path)],
        stdout=subprocess.PIPE,
        bufsize=0,  # unbuffered: select() on the pipe then sees every line
        stderr=subprocess.DEVNULL,
        cwd=ROOT,
    )
    _started(demo)
    deadline = time.monotonic() + 120
    while b"Ctrl-C stops the demo" not in _line(demo, 120):
        assert time.monotonic() < deadline and demo.poll() is None
    kids = _children(demo.pid)
    assert kids, "the demo runs its stub home as a child"
    demo.send_signal(getattr(signal, how))
    demo.wait(BOUND_S)
    assert demo.stdout is not None
    demo.stdout.close()
    assert _wait_gone(kids) == set(), f"left after {how}: {kids}"


@pytest.mark.parametrize("how", ["lifeline closed", "SIGTERM", "SIGKILL"])
def test_the_bench_bridge_server_leaves_no_stub(how: str, tmp_path: Path) -> None:
    """The bench's bridge server as `bench/run.py` starts it (figures are not the point)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        [
            *(sys.executable, "bench/bridge_server.py", "--port", str(port)),
            *("--homes", "2", "--agents", "1", "--tokens", str(tmp_path / "tokens")),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        bufsize=0,  # unbuffered: select() on the pipe then sees every line
        stderr=subprocess.DEVNULL,
        cwd=ROOT,
    )
    assert _line(_started(server), 120).strip() == b"ready"
    kids = _children(server.pid)
    assert kids, "the bridge server runs its stub fleet as a child"
    assert server.stdin is not None
    if how == "lifeline closed":  # what bench/run.py's stop() does first
        server.stdin.close()
    else:
        server.send_signal(getattr(signal, how))
    server.wait(BOUND_S)
    server.stdin.close()
    assert server.stdout is not None
    server.stdout.close()
    assert _wait_gone(kids) == set(), f"left after {how}: {kids}"


def test_the_bridge_exits_when_its_lifeline_closes(tmp_path: Path) -> None:
    """`ftwbridge serve --exit-with-parent` (the soak's bridge): standard input closing drains
    and stops it as SIGTERM would, exit 0."""
    config = tmp_path / "bridge.toml"
    config.write_text(
        f'bind = "127.0.0.1:0"\npublic_url = "http://127.0.0.1:0"\nadmin_bind = "none"\n'
        'door_bind = "127.0.0.1:0"\n'
        f'state_dir = "{tmp_path / "state"}"\n'
    )
    bridge = subprocess.Popen(
        [sys.executable, "-m", "ftwbridge", "serve", "--config", str(config), "--exit-with-parent"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        bufsize=0,  # unbuffered: select() on the pipe then sees every line
        stderr=subprocess.DEVNULL,
        cwd=ROOT,
    )
    assert _line(_started(bridge), 60).startswith(b"ftwbridge serving ")
    took = time.monotonic()
    assert bridge.stdin is not None
    bridge.stdin.close()
    bridge.wait(BOUND_S)
    assert bridge.returncode == 0 and time.monotonic() - took < BOUND_S / 2
