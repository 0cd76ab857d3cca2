"""`listen_backlog`: each listener's queue of connections not yet accepted, read back from the
kernel (`ss`: a listening socket's Send-Q is its backlog), and its bounds."""

from __future__ import annotations

import shutil
import subprocess

import pydantic
import pytest
import trio

from ftwbridge.config import Config
from ftwbridge.run import Bridge

from .test_cli import _free_port


def _backlog(port: int) -> int:
    out = subprocess.run(
        ["ss", "-ltnH", f"sport = :{port}"], capture_output=True, text=True, check=True, timeout=10
    ).stdout.split()
    return int(out[2])  # State Recv-Q Send-Q Local Peer


@pytest.mark.skipif(shutil.which("ss") is None, reason="iproute2's ss is not installed")
async def test_every_listener_has_the_backlog_set(tmp_path: object) -> None:
    port, admin, door = _free_port(), _free_port(), _free_port()
    config = Config(
        state_dir=tmp_path,
        bind=f"127.0.0.1:{port}",
        admin_bind=f"127.0.0.1:{admin}",
        door_bind=f"127.0.0.1:{door}",
        listen_backlog=200,
    )
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            await nursery.start(Bridge(config).serve)
            seen = [await trio.to_thread.run_sync(_backlog, p) for p in (port, admin, door)]
            nursery.cancel_scope.cancel()
    assert seen == [200, 200, 200]
    assert Config().listen_backlog == 1024


def test_a_backlog_out_of_range_is_refused() -> None:
    for bad in (0, 15, 65536):
        with pytest.raises(pydantic.ValidationError, match="listen_backlog"):
            Config(listen_backlog=bad)
