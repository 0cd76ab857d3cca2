"""The cluster fixture's starts (`conftest.Cluster`): a child that exits before its first line
is reported with its exit status and the end of its standard error, and an instance whose port
another process took between the choice and the bind is started again on new ports. No cluster
runs here."""

from __future__ import annotations

import os
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
