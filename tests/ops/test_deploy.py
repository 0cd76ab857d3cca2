"""The deployment files of deploy/ work as far as this machine can tell: the sample config is
what `ftwbridge config sample` prints and loads to the defaults; the systemd unit passes
`systemd-analyze verify`; the HAProxy example passes `haproxy -c`; the compose files and the
Containerfile say what docs/operations.md ("Deploying") says; and the image's install steps
(deploy/install.sh from a folder of wheels) run as a user other than root in a fresh venv, whose
`ftwbridge serve` keeps its state in a folder of that user's and answers the image's health
check (deploy/healthcheck.py). No docker daemon runs here: the image itself is not built."""

from __future__ import annotations

import datetime
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from cluster.affinity import affinity_lines
from ftwbridge.config import Config, load_config
from ftwbridge.settings import sample_toml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
BOUND_S = 300


def test_the_sample_config_cannot_drift_and_loads_to_the_defaults() -> None:
    sample = DEPLOY / "bridge.toml"
    assert sample.read_text() == sample_toml(), "run: ftwbridge config sample > deploy/bridge.toml"
    lines = [line for line in sample.read_text().splitlines() if line and not line.startswith("#")]
    assert lines == []  # every setting is there, commented out at its default
    assert load_config(sample, env={}) == Config()
    for name in Config.model_fields:
        assert f"\n#{name} =" in sample.read_text(), name
    # uncommenting every default that has one gives the defaults again
    live = sample.parent / "bridge.toml"
    text = "\n".join(
        line[1:] if line.startswith("#") and " = " in line and not line.endswith("=") else line
        for line in live.read_text().splitlines()
    )
    uncommented = Path(tempfile.mkdtemp()) / "bridge.toml"
    uncommented.write_text(text)
    loaded = load_config(uncommented, env={})
    assert loaded.model_dump(exclude={"state_dir"}) == Config().model_dump(exclude={"state_dir"})
    assert loaded.state_dir == uncommented.parent / "state"
    shutil.rmtree(uncommented.parent)


def test_the_systemd_unit_verifies() -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not on this machine")
    unit = (DEPLOY / "ftwbridge.service").read_text()
    assert "KillSignal=SIGTERM" in unit and "StateDirectory=ftwbridge" in unit
    stop_s = int(
        next(line for line in unit.splitlines() if line.startswith("TimeoutStopSec=")).split("=")[1]
    )
    assert stop_s > Config().drain_s + 5
    with tempfile.TemporaryDirectory() as folder:
        # verify checks that ExecStart's program exists: point it at this machine's install
        here = unit.replace(
            "/opt/ftwbridge/bin/ftwbridge", str(Path(sys.executable).parent / "ftwbridge")
        )
        path = Path(folder) / "ftwbridge.service"
        path.write_text(here)
        done = subprocess.run(
            [analyze, "verify", str(path)], capture_output=True, text=True, timeout=60, check=False
        )
    assert done.returncode == 0 and done.stderr == "" and done.stdout == "", done.stderr


def _pem(folder: Path) -> Path:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "bridge.example.org")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    path = folder / "bridge.pem"
    path.write_bytes(
        cert.public_bytes(serialization.Encoding.PEM)
        + key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return path


MAP = "/etc/haproxy/ftw-homes.map"
"""The example's map of home tags to instances (docs/operations.md, "Calls at the holder")."""


def test_the_haproxy_example_is_valid(tmp_path: Path) -> None:
    haproxy = shutil.which("haproxy")
    if haproxy is None:
        pytest.skip("haproxy is not installed here: make haproxy")
    text = (DEPLOY / "haproxy.cfg").read_text()
    for path in ("/mcp", "/v1/box", "/authorize", "/oauth/token", "/.well-known/"):
        assert path in text
    for line in affinity_lines("learned", Path(MAP), ["b1"]).splitlines():
        assert line.lstrip().startswith("#") or line in text.splitlines(), line  # make cluster's
    (tmp_path / "ftw-homes.map").touch()
    text = text.replace(MAP, str(tmp_path / "ftw-homes.map"))
    cfg = tmp_path / "haproxy.cfg"
    cfg.write_text(text.replace("/etc/haproxy/certs/bridge.example.org.pem", str(_pem(tmp_path))))
    done = subprocess.run(
        [haproxy, "-c", "-f", str(cfg)], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_docs_show_the_affinity_lines_make_cluster_writes() -> None:
    """docs/operations.md, "Calls at the holder": the lines an operator copies are the ones
    `cluster/affinity.py` writes (for two servers named as there)."""
    doc = (DEPLOY.parent / "docs" / "operations.md").read_text().splitlines()
    for line in affinity_lines("learned", Path(MAP), ["bridge-1", "bridge-2"]).splitlines():
        assert line in doc, line


def test_the_caddy_example_is_valid() -> None:
    caddy = shutil.which("caddy")
    if caddy is None:
        pytest.skip("caddy is not installed here: make caddy")
    text = (DEPLOY / "Caddyfile").read_text()
    for path in ("/mcp", "/v1/box", "/authorize", "/oauth/*", "/.well-known/*"):
        assert path in text
    done = subprocess.run(
        [caddy, "validate", "--config", str(DEPLOY / "Caddyfile"), "--adapter", "caddyfile"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=tempfile.gettempdir(),
    )
    assert done.returncode == 0 and "Valid configuration" in done.stdout + done.stderr, done.stderr


def test_the_compose_files_keep_state_on_a_volume_and_stop_gracefully() -> None:
    for name in ("compose.yaml", "compose.postgres.yaml"):
        spec = yaml.safe_load((DEPLOY / name).read_text())
        bridge = spec["services"]["bridge"]
        assert any(v.endswith(":/var/lib/ftwbridge") for v in bridge["volumes"]), name
        assert int(bridge["stop_grace_period"].removesuffix("s")) > Config().drain_s, name
        assert all(p.startswith("127.0.0.1:") for p in bridge["ports"]), name
        assert bridge["build"]["dockerfile"] == "deploy/Containerfile"
    pg = yaml.safe_load((DEPLOY / "compose.postgres.yaml").read_text())
    assert pg["services"]["bridge"]["environment"]["FTWBRIDGE_SECRETS_DIR"] == "/run/secrets"
    assert "database_url" in pg["secrets"] and pg["services"]["bridge"]["depends_on"]["db"]


def test_the_containerfile_runs_unprivileged_with_a_health_check() -> None:
    text = (DEPLOY / "Containerfile").read_text()
    assert "USER 10001:10001" in text and "VOLUME /var/lib/ftwbridge" in text
    assert "HEALTHCHECK" in text and "healthcheck.py" in text and "STOPSIGNAL SIGTERM" in text
    assert "deploy/install.sh" in text and "/opt/ftwbridge-deploy/install.sh /tmp/wheels" in text
    assert (DEPLOY / "Dockerfile").resolve() == (DEPLOY / "Containerfile").resolve()


def _as_nobody(argv: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return argv
    return ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", *argv]


@dataclass(frozen=True)
class Installed:
    """The wheel installed by deploy/install.sh into a fresh venv, as nobody."""

    prefix: Path
    home: Path
    env: dict[str, str]
    uid: int | None


@pytest.fixture(scope="module")
def installed() -> Iterator[Installed]:
    """The image's two stages, outside pytest's own folder (which only root may enter)."""
    shared = Path(tempfile.mkdtemp(prefix="ftwbridge-deploy-"))
    shared.chmod(0o755)
    try:
        yield _install(shared)
    finally:
        shutil.rmtree(shared, ignore_errors=True)


def _install(shared: Path) -> Installed:
    # the first stage: wheels of the bridge and every dependency, built from a copy of the
    # sources so that the clone is left as it was (setuptools writes build/ beside them)
    src = shared / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for package in ("ftwbridge", "stubbox"):
        shutil.copytree(ROOT / package, src / package, ignore=shutil.ignore_patterns("__pycache__"))
    wheels = shared / "wheels"
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--wheel-dir", str(wheels), str(src)],
        capture_output=True,
        text=True,
        timeout=BOUND_S,
        check=False,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    # the second stage, as a user other than root: a fresh venv, offline, from those wheels
    home = shared / "home"
    home.mkdir()
    nobody = pwd.getpwnam("nobody") if os.geteuid() == 0 else None
    if nobody is not None:
        os.chown(home, nobody.pw_uid, nobody.pw_gid)
    prefix = home / "venv"
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": str(home)}
    installed = subprocess.run(
        _as_nobody([str(DEPLOY / "install.sh"), str(wheels), str(prefix)]),
        capture_output=True,
        text=True,
        timeout=BOUND_S,
        check=False,
        env=env,
    )
    assert installed.returncode == 0, installed.stderr[-3000:]
    assert installed.stdout.strip().endswith("ftwbridge 0.1.0")
    return Installed(prefix, home, env, nobody.pw_uid if nobody else None)


def test_the_image_install_steps_run_as_a_user_other_than_root(installed: Installed) -> None:
    prefix, home, env = installed.prefix, installed.home, installed.env
    # the image's command with its state on the "volume", and its health check
    state = home / "state"
    serve_env = env | {
        "FTWBRIDGE_STATE_DIR": str(state),
        "FTWBRIDGE_BIND": "127.0.0.1:0",
        "FTWBRIDGE_ADMIN_BIND": "127.0.0.1:0",
        "FTWBRIDGE_DOOR_BIND": "127.0.0.1:0",
    }
    with subprocess.Popen(
        _as_nobody([str(prefix / "bin" / "ftwbridge"), "serve"]),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=serve_env,
    ) as proc:
        try:
            assert proc.stdout is not None and proc.stderr is not None
            serving = proc.stdout.readline()
            admin = proc.stdout.readline().split()[-1]
            assert serving.startswith("ftwbridge serving "), serving
            check = subprocess.run(
                _as_nobody(
                    [
                        str(prefix / "bin" / "python"),
                        str(DEPLOY / "healthcheck.py"),
                        admin + "/readyz",
                    ]
                ),
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
                env=env,
            )
            assert check.returncode == 0 and check.stdout.strip() == "ready", check.stderr
            database = state / "bridge.sqlite"
            if installed.uid is not None:
                assert database.stat().st_uid == installed.uid
            assert database.stat().st_mode & 0o077 == 0 and state.stat().st_mode & 0o077 == 0
        finally:
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=60) == 0
    down = subprocess.run(
        [str(prefix / "bin" / "python"), str(DEPLOY / "healthcheck.py"), admin + "/readyz"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert down.returncode == 1 and "does not answer" in down.stderr


WHEEL_COMMANDS = [
    ["serve"],
    ["keys"],
    ["home", "enroll"],
    ["home", "list"],
    ["agent", "create"],
    ["agent", "list"],
    ["token", "issue"],
    ["db", "migrate"],
    ["db", "import"],
    ["db", "backup"],
    ["db", "restore"],
    ["config", "check"],
    ["config", "sample"],
    ["demo"],
]


def test_every_command_of_the_wheel_works_or_names_its_extra(installed: Installed) -> None:
    """From the operator's install (the wheel, no test extras): every command answers
    `--help`; the ones that need nothing else run; `demo` says in one sentence which extra it
    needs, since the official MCP client is not a dependency of the bridge."""
    bin_dir = installed.prefix / "bin"

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            _as_nobody([str(bin_dir / "ftwbridge"), *argv]),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            env=installed.env | {"FTWBRIDGE_STATE_DIR": str(installed.home / "wheel-state")},
            cwd=installed.home,
        )

    for argv in WHEEL_COMMANDS:
        done = run(*argv, "--help")
        assert done.returncode == 0 and done.stdout.startswith("usage: ftwbridge"), (
            argv,
            done.stderr,
        )
    assert run("config", "sample").stdout == sample_toml()
    assert run("config", "check").returncode == 0
    demo = run("demo", "--once")
    assert demo.returncode == 2 and demo.stdout == "", demo.stderr
    assert demo.stderr == (
        "ftwbridge: ftwbridge demo needs the official MCP Python client (the demo's assistant),"
        " which is not installed: pip install 'ftwbridge[demo]' (or pip install mcp into this"
        " environment)\n"
    )
    stub = subprocess.run(
        _as_nobody([str(bin_dir / "python"), "-m", "stubbox", "--help"]),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=installed.env,
    )
    assert stub.returncode == 0 and stub.stdout.startswith("usage:"), stub.stderr
