"""The command line's habits: `--version`, `config check` (the settings in effect, secrets
masked), `home list` and `agent list` on a running bridge's state, help with examples and each
setting's variable, and every bench and tool script answering `--help` without running."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import trio

from ftwbridge.config import Config, load_config
from ftwbridge.settings import MASK, settings
from tests.e2e.env import Env

ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "ftwbridge"]
MESH = "ab" * 32
BOUND_S = 60


def run(
    *argv: str, env: dict[str, str] | None = None, cwd: Path = ROOT
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *argv],
        capture_output=True,
        text=True,
        timeout=BOUND_S,
        check=False,
        cwd=cwd,
        env={k: v for k, v in os.environ.items() if not k.startswith("FTWBRIDGE_")} | (env or {}),
    )


def test_version_is_the_packages() -> None:
    done = run("--version")
    assert done.returncode == 0
    assert done.stdout.strip() == f"ftwbridge {importlib.metadata.version('ftwbridge')}"


def test_config_check_prints_the_effective_settings_with_secrets_masked(tmp_path: Path) -> None:
    path = tmp_path / "bridge.toml"
    path.write_text(
        f'bind = "127.0.0.1:9000"\nmesh_key = "{MESH}"\n'
        'database_url = "postgresql://bridge:s3cret-pw@db:5432/bridge"\n'
    )
    done = run("config", "check", "--config", str(path), env={"FTWBRIDGE_DRAIN_S": "3"})
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert MESH not in out and "s3cret-pw" not in out
    assert f'mesh_key = "{MASK}"  # {path}' in out
    assert 'database_url = "postgresql://bridge:***@db:5432/bridge"' in out
    assert "drain_s = 3.0  # FTWBRIDGE_DRAIN_S" in out
    assert 'bind = "127.0.0.1:9000"' in out and "# kek is unset (default)" in out
    # what it prints is TOML a file can hold: without the masked lines it loads to the same
    shown = tomllib.loads(out)
    again = tmp_path / "again.toml"
    again.write_text(
        "\n".join(line for line in out.splitlines() if MASK not in line and "***" not in line)
    )
    reloaded = load_config(again, env={})
    want = load_config(path, env={"FTWBRIDGE_DRAIN_S": "3"})
    for s in settings():
        if s.name not in ("mesh_key", "database_url", "state_dir"):
            assert getattr(reloaded, s.name) == getattr(want, s.name), s.name
    assert set(shown) <= set(Config.model_fields)


def test_config_check_says_what_is_wrong_in_one_sentence(tmp_path: Path) -> None:
    path = tmp_path / "bridge.toml"
    path.write_text("drain_s = -1\n")
    done = run("config", "check", "--config", str(path))
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "drain_s" in done.stderr, done.stderr


def test_help_shows_examples_and_every_settings_variable() -> None:
    top = run("--help")
    assert top.returncode == 0 and "examples:" in top.stdout
    assert "ftwbridge home list" in top.stdout and "ftwbridge config check" in top.stdout
    config = run("config", "--help")
    for s in settings():
        assert f"  {s.name}  ({s.variable}; default " in config.stdout, s.name


def test_lists_refuse_a_folder_with_no_state_and_make_none(tmp_path: Path) -> None:
    for argv in (["home", "list"], ["agent", "list", "--home", "h1"]):
        done = run(*argv, env={"FTWBRIDGE_STATE_DIR": str(tmp_path / "nothing")})
        assert done.returncode == 2 and "no bridge state is in" in done.stderr, done.stderr
        assert "Traceback" not in done.stderr
    assert not (tmp_path / "nothing").exists()


async def test_home_and_agent_lists_read_a_running_bridges_state(env: Env) -> None:
    home = await env.add_home("h1")
    await env.add_home("h2")
    _key, agent_id, _token = await env.agent(home)
    state = {"FTWBRIDGE_STATE_DIR": str(env.bridge.config.state_dir)}
    homes = await trio.to_thread.run_sync(lambda: run("home", "list", env=state))
    assert homes.returncode == 0, homes.stderr
    lines = homes.stdout.splitlines()
    assert [line.split()[0] for line in lines] == ["h1", "h2"]
    assert "agent(s)" in lines[0]
    agents = await trio.to_thread.run_sync(lambda: run("agent", "list", "--home", "h1", env=state))
    assert agents.returncode == 0, agents.stderr
    assert agents.stdout.startswith("# home h1, roster seq ")
    row = next(line for line in agents.stdout.splitlines() if line.startswith(agent_id))
    assert "ftw.live.read" in row and "until 20" in row and "(in " in row
    missing = await trio.to_thread.run_sync(lambda: run("agent", "list", "--home", "zz", env=state))
    assert missing.returncode == 2 and "home 'zz': not enrolled" in missing.stderr


SCRIPTS = [
    *[[str(p)] for p in sorted((ROOT / "bench").glob("*.py"))],
    ["-m", "cluster"],
    ["-m", "soak.run"],
    ["-m", "stubbox"],
    ["-m", "ftwbridge"],
    [str(ROOT / "deploy" / "healthcheck.py")],
]


@pytest.mark.parametrize("argv", SCRIPTS, ids=lambda a: a[-1].rsplit("/", 1)[-1])
def test_every_script_answers_help_without_running(argv: list[str]) -> None:
    done = subprocess.run(
        [sys.executable, *argv, "--help"],
        capture_output=True,
        text=True,
        timeout=BOUND_S,
        check=False,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("usage:"), done.stdout[:500]
