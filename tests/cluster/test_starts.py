"""The starts of the tests' cluster fixture (`conftest.Cluster`) and of the rig
(`cluster.services.Instance`): a child that exits before its first line is reported with its
exit status and the end of its standard error, and an instance whose port another process took
between the choice and the bind is started again on new ports. No cluster runs here (the rig's
case starts one real `ftwbridge serve` on SQLite)."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

from .conftest import Cluster, Instance, StartFailed

TAKEN = "ftwbridge: the main listener cannot bind 127.0.0.1:{port}: the port is in use"


def _cluster(folder: Path) -> Cluster:
    return Cluster(folder, dict(os.environ), b"k" * 32, "postgresql://unused")


def test_a_child_that_exits_at_start_says_its_status_and_stderr(tmp_path: Path) -> None:
    said = "import sys; print('ftwbridge: kek is not set', file=sys.stderr); sys.exit(2)"
    with pytest.raises(StartFailed) as failed:
        _cluster(tmp_path).start([sys.executable, "-c", said], "child.log")
    assert "exited with status 2 before it started" in str(failed.value)
    assert "ftwbridge: kek is not set" in str(failed.value)
    assert not failed.value.port_taken


class Taken(Cluster):
    """`start` fails as `serve` does when its port was taken, `fails` times, then starts."""

    fails = 2
    tried: list[int]

    def start(self, argv: list[str], log: str, env: dict[str, str] | None = None) -> Any:
        assert env is not None
        port = int(env["FTWBRIDGE_BIND"].rsplit(":", 1)[1])
        self.tried.append(port)
        if len(self.tried) <= self.fails:
            message = f"exited with status 2; its stderr ends:\n{TAKEN.format(port=port)}"
            raise StartFailed(message, port_taken=True)
        return None, "ftwbridge serving http://127.0.0.1:1/mcp"


def test_an_instance_whose_port_was_taken_starts_on_new_ports(tmp_path: Path) -> None:
    made = Taken(tmp_path, dict(os.environ), b"k" * 32, "postgresql://unused")
    made.tried = []
    inst = Instance("b-1", 1, 2, 3)
    made.start_instance(inst)
    assert len(made.tried) == 3 and made.tried[0] == 1
    assert len(set(made.tried)) == 3 and inst.port == made.tried[-1]
    made.tried, made.fails = [], 3  # taken every time: the third failure is reported
    with pytest.raises(StartFailed, match="the port is in use"):
        made.start_instance(Instance("b-2", 4, 5, 6))


async def test_a_rig_instance_whose_port_was_taken_starts_on_new_ports_and_says_so(
    tmp_path: Path,
) -> None:
    """`cluster.services.Instance.start` with a real `ftwbridge serve` (on SQLite: no
    database needed): its main port is held here before it binds, so `serve` exits saying
    the port is in use, and the instance starts again on new ports, once, and says so in
    its log. A restart keeps its ports (HAProxy's configuration names them): a port taken
    then is reported."""
    import socket

    import trio

    from cluster.procs import WAIT_S, CannotStart, free_port
    from cluster.services import PORT_TRIES
    from cluster.services import Instance as RigInstance

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        admin, door = free_port(), free_port()
        settings = {
            "bind": f"127.0.0.1:{port}",
            "admin_bind": f"127.0.0.1:{admin}",
            "door_bind": f"127.0.0.1:{door}",
            "state_dir": str(tmp_path / "b1"),
        }
        made = RigInstance("b1", tmp_path, port, admin, free_port(), settings=settings)
        made.write_config()
        async with trio.open_nursery() as nursery:
            with trio.fail_after(WAIT_S * (PORT_TRIES + 1)):
                await made.start(nursery)
                assert made.child is not None and made.child.proc.returncode is None
                assert made.port != port and made.settings["bind"] == f"127.0.0.1:{made.port}"
                assert made.settings["admin_bind"] == f"127.0.0.1:{made.admin_port}"
                assert made.door_port not in (port, door)
                assert f'bind = "127.0.0.1:{made.port}"' in made.config_path.read_text()
                said = (tmp_path / "b1.log").read_text()
                assert said.count("starting it again on new ports") == 1, said
                assert "the port is in use" in said and made.ports_words() in said, said
                stream = await trio.open_tcp_stream("127.0.0.1", made.port)  # it serves there
                await stream.aclose()
                # a restart on a port taken meanwhile: reported, and the ports stay
                made.child.signal(signal.SIGTERM)
                await made.child.proc.wait()
                ports = (made.port, made.admin_port, made.door_port)
                with socket.socket() as again:
                    again.bind(("127.0.0.1", made.port))
                    again.listen()
                    with pytest.raises(CannotStart, match="the port is in use"):
                        await made.start(nursery)
                assert (made.port, made.admin_port, made.door_port) == ports
            nursery.cancel_scope.cancel()
