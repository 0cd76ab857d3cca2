"""One keys part per socket path.

A second keys part on a path another one serves refuses in one sentence (status 2 from the
command line) and leaves the live socket alone; a socket file left by a dead process is taken
over. Real Unix sockets under `tmp_path`; the command-line case runs real processes.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from ftwbridge.keys import KeysClient, KeysService, serve_keys
from ftwbridge.keys.wire import KeysSocketError


async def test_a_second_keys_part_refuses_and_the_first_keeps_serving(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    sock = tmp_path / "keys.sock"
    service = KeysService(tmp_path / "keys.json")
    await nursery.start(serve_keys, sock, service)
    with pytest.raises(KeysSocketError, match="another keys part is already serving"):
        await nursery.start(serve_keys, sock, KeysService(tmp_path / "other.json"))
    assert sock.is_socket()  # the refused one neither took the path nor removed it
    key = await KeysClient(sock).create("h1")
    assert await service.has(key)  # answered by the first keys part


async def test_a_stale_socket_file_is_taken_over(tmp_path: Path, nursery: trio.Nursery) -> None:
    sock = tmp_path / "keys.sock"
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(sock))
    dead.close()  # a process that died leaves its socket file behind
    assert sock.is_socket()
    service = KeysService(tmp_path / "keys.json")
    await nursery.start(serve_keys, sock, service)
    assert await KeysClient(sock).has(await service.create("h1"))


async def test_the_path_is_free_again_once_the_keys_part_stops(tmp_path: Path) -> None:
    sock = tmp_path / "keys.sock"
    service = KeysService(tmp_path / "keys.json")
    async with trio.open_nursery() as nursery:
        await nursery.start(serve_keys, sock, service)
        nursery.cancel_scope.cancel()
    assert not sock.exists()
    async with trio.open_nursery() as nursery:
        await nursery.start(serve_keys, sock, service)
        assert not await KeysClient(sock).has(bytes(32))
        nursery.cancel_scope.cancel()


async def test_a_path_that_is_not_a_socket_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("keep me")
    with pytest.raises(KeysSocketError, match="exists and is not a socket"):
        await serve_keys(path, KeysService(tmp_path / "keys.json"))
    assert path.read_text() == "keep me"


async def test_a_path_too_long_for_a_socket_is_refused_in_words(tmp_path: Path) -> None:
    path = tmp_path / ("k" * 120)
    with pytest.raises(KeysSocketError, match="cannot serve on"):
        await serve_keys(path, KeysService(tmp_path / "keys.json"))
    assert not path.exists()


def test_cli_refuses_a_socket_another_keys_part_serves(tmp_path: Path) -> None:
    sock = tmp_path / "keys.sock"
    env = os.environ | {"FTWBRIDGE_STATE_DIR": str(tmp_path / "state")}
    cmd = [sys.executable, "-m", "ftwbridge", "keys", "--socket", str(sock)]
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env) as first:
        try:
            assert first.stdout is not None
            assert first.stdout.readline().startswith("keys part on")
            second = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60)
            assert second.returncode == 2
            assert "Traceback" not in second.stderr
            assert second.stderr.strip().splitlines() == [
                f"ftwbridge: another keys part is already serving {sock}; stop it first or"
                " choose another --socket"
            ]
            assert sock.is_socket() and first.poll() is None
            probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            probe.connect(str(sock))  # the first still answers on its socket
            probe.close()
        finally:
            first.terminate()
            first.wait(timeout=30)
    assert not sock.exists()
