"""Start-up as an operator meets it: the real `python -m ftwbridge` in a process.

Each way a start can fail ends with one sentence on stderr, `ftwbridge: ...`, exit status 2
and no traceback; `public_url` follows `bind`; the log carries level and logger, as text or
JSON. Every wait is bounded by `BOUND_S`.
"""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from devtools.rig import free_port as _free_port

BOUND_S = 30.0
"""Bound on one command's run or on a server's first line, seconds (a loaded CI machine)."""
DEMO_BOUND_S = 150.0
"""Bound on one `demo --once`: Python's start, a bridge and a stub home, an OAuth sign-in and
some 80 calls take about 11 s with two busy loops beside them; several times busier, 30 s
was not enough."""


def _env(**extra: str) -> dict[str, str]:
    """The environment without any `FTWBRIDGE_*` of the caller's, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FTWBRIDGE_")}
    env.update(extra)
    return env


def ftwbridge(
    *args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = BOUND_S
) -> subprocess.CompletedProcess[str]:
    """Run `python -m ftwbridge ARGS` to its end in `cwd` (within `timeout` seconds)."""
    return subprocess.run(
        [sys.executable, "-m", "ftwbridge", *args],
        cwd=cwd,
        env=_env() if env is None else env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def refused(result: subprocess.CompletedProcess[str], *words: str) -> str:
    """Assert the one-sentence refusal: status 2, no traceback, one line naming `words`."""
    out = result.stdout + result.stderr
    assert "Traceback" not in out, out
    assert result.returncode == 2, out
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("ftwbridge: "), lines[0]
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


@pytest.fixture
def held_port() -> Iterator[int]:
    """A port on 127.0.0.1 that another program is listening on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield int(s.getsockname()[1])


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


# -- the configuration file and variables --------------------------------------------------


def test_bad_toml_names_line_and_column(tmp_path: Path) -> None:
    cfg = write(tmp_path / "bridge.toml", 'bind = "127.0.0.1:8780"\nstate_dir = \n')
    refused(
        ftwbridge("serve", "--config", str(cfg), cwd=tmp_path),
        "bridge.toml is not valid TOML at line 2, column 13",
    )


def test_unknown_key_suggests_the_nearest(tmp_path: Path) -> None:
    cfg = write(tmp_path / "bridge.toml", 'bindd = "127.0.0.1:8780"\n')
    refused(
        ftwbridge("serve", "--config", str(cfg), cwd=tmp_path),
        "unknown key 'bindd'",
        "did you mean 'bind'?",
    )


def test_unknown_variable_suggests_the_nearest(tmp_path: Path) -> None:
    env = _env(FTWBRIDGE_CALL_DEADLINE="5")
    refused(
        ftwbridge("serve", cwd=tmp_path, env=env),
        "FTWBRIDGE_CALL_DEADLINE names no setting",
        "did you mean FTWBRIDGE_CALL_DEADLINE_S?",
    )


@pytest.mark.parametrize(
    ("line", "words"),
    [
        ("call_deadline_s = -1", "call_deadline_s must be greater than 0 (got -1)"),
        ("pace_calls_per_s = 0", "pace_calls_per_s must be greater than 0 (got 0)"),
        ("http_burst = 0.5", "http_burst must be greater than or equal to 1 (got 0.5)"),
        ("warm_sessions = 0", "warm_sessions must be greater than or equal to 1 (got 0)"),
        ('warm_sessions = "many"', "warm_sessions must be a valid integer"),
        ('log_format = "xml"', "log_format must be 'text' or 'json'"),
        ('log_level = "loud"', "log_level must be one of debug, info"),
        ('public_url = "127.0.0.1:8780"', "public_url must be an http:// or https:// URL"),
        ('door_bind = "none"', "door_bind must be a host:port: the door always has its own"),
    ],
)
def test_nonsense_values_are_refused(tmp_path: Path, line: str, words: str) -> None:
    cfg = write(tmp_path / "bridge.toml", line + "\n")
    sentence = refused(ftwbridge("serve", "--config", str(cfg), cwd=tmp_path), words)
    assert str(cfg) in sentence  # it says where the value came from


def test_a_value_from_the_environment_names_the_variable(tmp_path: Path) -> None:
    env = _env(FTWBRIDGE_DOOR_MSGS_BURST="0")
    refused(
        ftwbridge("serve", cwd=tmp_path, env=env),
        "door_msgs_burst must be greater than or equal to 1 (got '0')",
        "the environment variable FTWBRIDGE_DOOR_MSGS_BURST",
    )


def test_missing_config_file(tmp_path: Path) -> None:
    refused(
        ftwbridge("serve", "--config", "nowhere.toml", cwd=tmp_path),
        "the config file nowhere.toml does not exist",
    )


@pytest.mark.parametrize("address", ["localhost", "127.0.0.1:http", "127.0.0.1:70000"])
def test_unparsable_bind(tmp_path: Path, address: str) -> None:
    cfg = write(tmp_path / "bridge.toml", f'bind = "{address}"\n')
    refused(
        ftwbridge("serve", "--config", str(cfg), cwd=tmp_path),
        f"bind must be host:port, such as 127.0.0.1:8780 (got '{address}')",
    )


def test_unparsable_admin_bind(tmp_path: Path) -> None:
    cfg = write(tmp_path / "bridge.toml", 'admin_bind = "8781"\n')
    refused(ftwbridge("serve", "--config", str(cfg), cwd=tmp_path), "admin_bind must be host:port")


# -- ports and folders -----------------------------------------------------------------------


def test_main_port_in_use(tmp_path: Path, held_port: int) -> None:
    cfg = write(tmp_path / "bridge.toml", f'bind = "127.0.0.1:{held_port}"\nadmin_bind = "none"\n')
    refused(
        ftwbridge("serve", "--config", str(cfg), cwd=tmp_path),
        f"the main listener cannot bind 127.0.0.1:{held_port}: the port is in use",
        "change bind",
    )


def test_admin_port_in_use(tmp_path: Path, held_port: int) -> None:
    cfg = write(
        tmp_path / "bridge.toml",
        f'bind = "127.0.0.1:0"\nadmin_bind = "127.0.0.1:{held_port}"\n',
    )
    refused(
        ftwbridge("serve", "--config", str(cfg), cwd=tmp_path),
        f"the admin listener cannot bind 127.0.0.1:{held_port}: the port is in use",
        "change admin_bind",
    )


def test_demo_port_in_use_says_how_to_pick_another(tmp_path: Path, held_port: int) -> None:
    refused(
        ftwbridge("demo", "--once", "--port", str(held_port), cwd=tmp_path),
        f"the main listener cannot bind 127.0.0.1:{held_port}: the port is in use",
        "--port N",
    )


def test_keys_socket_in_use(tmp_path: Path) -> None:
    """The keys listener: a second keys part on a served socket is refused by name."""
    sock = tmp_path / "keys.sock"
    first = subprocess.Popen(
        [sys.executable, "-m", "ftwbridge", "keys", "--socket", str(sock)],
        cwd=tmp_path,
        env=_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert first.stdout is not None
        ready, _, _ = select.select([first.stdout], [], [], BOUND_S)
        assert ready and b"keys part on" in first.stdout.readline()
        refused(ftwbridge("keys", "--socket", str(sock), cwd=tmp_path), "keys part", str(sock))
    finally:
        first.terminate()
        first.communicate(timeout=BOUND_S)


def test_state_folder_that_is_a_file(tmp_path: Path) -> None:
    write(tmp_path / "afile", "")
    cfg = write(tmp_path / "bridge.toml", 'state_dir = "afile"\n')
    refused(
        ftwbridge("serve", "--config", str(cfg), cwd=tmp_path),
        f"the state folder {tmp_path / 'afile'} is a file, not a folder",
        "change state_dir",
    )


def test_state_folder_that_cannot_be_made(tmp_path: Path) -> None:
    write(tmp_path / "afile", "")
    env = _env(FTWBRIDGE_STATE_DIR=str(tmp_path / "afile" / "state"))
    refused(
        ftwbridge("home", "enroll", "--home", "H", "--key", "00" * 32, cwd=tmp_path, env=env),
        "cannot be written: Not a directory",
        "FTWBRIDGE_STATE_DIR",
    )


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only folder anyway")
def test_state_folder_without_write_permission(tmp_path: Path) -> None:
    folder = tmp_path / "ro"
    folder.mkdir(mode=0o500)
    env = _env(FTWBRIDGE_STATE_DIR=str(folder))
    refused(ftwbridge("serve", cwd=tmp_path, env=env), "cannot be written: Permission denied")


@pytest.mark.parametrize("command", [["serve"], ["token", "issue", "--home", "H", "--agent", "a"]])
def test_damaged_database(tmp_path: Path, command: list[str]) -> None:
    write(tmp_path / "state" / "bridge.sqlite", "not a database, " * 512)
    env = _env(FTWBRIDGE_STATE_DIR="state", FTWBRIDGE_ADMIN_BIND="none")
    refused(
        ftwbridge(*command, cwd=tmp_path, env=env),
        "the database state/bridge.sqlite is damaged (file is not a database)",
        "restore it from a backup",
    )


def test_relative_state_dir_is_read_from_the_files_folder(tmp_path: Path) -> None:
    """`home enroll` from another folder writes beside the config file, not in the cwd."""
    cfg = write(tmp_path / "etc" / "bridge.toml", 'state_dir = "state"\n')
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = ftwbridge(
        "home", "enroll", "--config", str(cfg), "--home", "H", "--key", "11" * 32, cwd=elsewhere
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "etc" / "state" / "bridge.sqlite").is_file()
    assert not (elsewhere / "state").exists()


def test_token_issue_without_state_creates_nothing(tmp_path: Path) -> None:
    cfg = write(tmp_path / "bridge.toml", 'state_dir = "state"\n')
    refused(
        ftwbridge(
            "token", "issue", "--config", str(cfg), "--home", "H", "--agent", "a", cwd=tmp_path
        ),
        f"no bridge state is in {tmp_path / 'state'}",
    )
    assert not (tmp_path / "state").exists()


# -- serving: the public URL and the log ------------------------------------------------------


def _serve(tmp_path: Path, config: str) -> tuple[subprocess.Popen[str], str]:
    """Start `ftwbridge serve` and return it with its first stdout line."""
    cfg = write(
        tmp_path / "bridge.toml",
        config + 'state_dir = "state"\nadmin_bind = "none"\ndoor_bind = "127.0.0.1:0"\n',
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "ftwbridge", "serve", "--config", str(cfg)],
        cwd=tmp_path,
        env=_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], BOUND_S)
    assert ready, "the bridge printed nothing"
    return proc, proc.stdout.readline().strip()


def _stop(proc: subprocess.Popen[str]) -> str:
    """SIGTERM; the bridge drains and exits 0. Returns what it wrote on stderr."""
    proc.terminate()
    _out, err = proc.communicate(timeout=BOUND_S)
    assert proc.returncode == 0, err
    assert "Traceback" not in err, err
    return err


def test_public_url_follows_bind(tmp_path: Path) -> None:
    """Only `bind` set: the banner, the OAuth metadata and the 401 challenge all name it."""
    port = _free_port()
    proc, banner = _serve(tmp_path, f'bind = "127.0.0.1:{port}"\n')
    try:
        resource = f"http://127.0.0.1:{port}/mcp"
        assert banner == f"ftwbridge serving {resource}"
        meta_url = f"http://127.0.0.1:{port}/.well-known/oauth-protected-resource/mcp"
        with urllib.request.urlopen(meta_url, timeout=BOUND_S) as answer:
            assert json.load(answer)["resource"] == resource
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        body = b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}'
        request = urllib.request.Request(resource, data=body, headers=headers, method="POST")
        with pytest.raises(urllib.error.HTTPError) as challenge:
            urllib.request.urlopen(request, timeout=BOUND_S)
        assert challenge.value.code == 401
        assert f"127.0.0.1:{port}/" in challenge.value.headers["WWW-Authenticate"]
        challenge.value.close()
    finally:
        err = _stop(proc)
    assert "loopback address" not in err


def test_loopback_public_url_on_a_public_bind_warns_once(tmp_path: Path) -> None:
    port = _free_port()
    proc, banner = _serve(
        tmp_path, f'bind = "0.0.0.0:{port}"\npublic_url = "http://127.0.0.1:{port}"\n'
    )
    assert banner == f"ftwbridge serving http://127.0.0.1:{port}/mcp"
    err = _stop(proc)
    warnings = [line for line in err.splitlines() if "loopback address" in line]
    assert len(warnings) == 1, err
    assert " WARNING ftwbridge " in warnings[0]
    assert f"but bind 0.0.0.0:{port} listens beyond this machine" in warnings[0]


def test_json_log_lines(tmp_path: Path) -> None:
    """`log_format = "json"`: every stderr line is one JSON object with the stable keys."""
    proc, _banner = _serve(tmp_path, 'bind = "127.0.0.1:0"\nlog_format = "json"\n')
    err = _stop(proc)
    records = [json.loads(line) for line in err.splitlines()]
    assert records, err
    for record in records:
        assert {"ts", "level", "logger", "msg"} <= record.keys()
        assert record["ts"].endswith("Z")
    assert any(r["logger"] == "ftwbridge" and r["msg"].startswith("bridge up") for r in records)
    assert {r["level"] for r in records} <= {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"}


def test_log_level_from_the_environment(tmp_path: Path) -> None:
    """FTWBRIDGE_LOG_LEVEL=warning leaves the info lines out."""
    cfg = write(
        tmp_path / "bridge.toml",
        'bind = "127.0.0.1:0"\nadmin_bind = "none"\ndoor_bind = "127.0.0.1:0"\nstate_dir = "s"\n',
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "ftwbridge", "serve", "--config", str(cfg)],
        cwd=tmp_path,
        env=_env(FTWBRIDGE_LOG_LEVEL="WARNING"),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], BOUND_S)
    assert ready
    err = _stop(proc)
    assert " INFO " not in err, err


# -- what a fresh-eyes walk through the README met (tracebacks where a sentence belongs) ------


def test_agent_create_with_no_keys_part_on_its_socket(tmp_path: Path) -> None:
    config = write(tmp_path / "b.toml", f'keys_socket = "{tmp_path / "none.sock"}"\n')
    refused(
        ftwbridge("agent", "create", "--config", str(config), "--home", "H", cwd=tmp_path),
        "not reachable",
        "keys_socket",
    )


def test_enroll_with_a_short_key(tmp_path: Path) -> None:
    refused(
        ftwbridge("home", "enroll", "--home", "H", "--key", "abcd", cwd=tmp_path),
        "32 bytes of hex",
    )


def test_stub_console_port_in_use(tmp_path: Path, held_port: int) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "stubbox",
            "--console",
            str(held_port),
            "--bridge",
            "ws://127.0.0.1:9/v1/box",
        ],
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=BOUND_S,
    )
    out = done.stdout + done.stderr
    assert done.returncode == 2 and "Traceback" not in out, out
    assert done.stderr.startswith("stubbox: the console cannot listen"), done.stderr


def test_demo_runs_twice_on_one_state_dir(tmp_path: Path) -> None:
    """`--state-dir` keeps the stub home's roster beside the bridge's, so a second run finds
    the roster the bridge holds (it once came back at seq 1 and hung, refused `stale_seq`)."""
    for _ in range(2):
        argv = ("demo", "--once", "--state-dir", str(tmp_path / "demo"))
        done = ftwbridge(*argv, cwd=tmp_path, timeout=DEMO_BOUND_S)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "demo session done" in done.stdout, done.stdout
        assert "ui://ftwbridge/home" in done.stdout  # how to see the home view


def test_serve_says_when_its_keys_part_does_not_answer(tmp_path: Path) -> None:
    """`keys_socket` naming a socket no keys part serves: the bridge serves (the keys part may
    come up later) but says so once at start, and `/readyz` gives the same reason."""
    sock = tmp_path / "none.sock"
    proc, _banner = _serve(tmp_path, f'bind = "127.0.0.1:{_free_port()}"\nkeys_socket = "{sock}"\n')
    err = _stop(proc)
    assert f"not ready: the keys part at {sock} does not answer" in err, err


def test_agent_create_for_a_home_never_enrolled(tmp_path: Path) -> None:
    key = "ab" * 32
    assert ftwbridge("home", "enroll", "--home", "H", "--key", key, cwd=tmp_path).returncode == 0
    refused(ftwbridge("agent", "create", "--home", "G", cwd=tmp_path), "'G' is not enrolled")
    made = ftwbridge("agent", "create", "--home", "H", cwd=tmp_path)
    assert made.returncode == 0 and len(bytes.fromhex(made.stdout.strip())) == 32, made.stderr
