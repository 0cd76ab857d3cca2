"""The configuration's rules across settings."""

from __future__ import annotations

from pathlib import Path

import pydantic
import pytest
from hypercorn.config import Config as HypercornConfig

from ftwbridge.config import Config, ConfigError, load_config


def test_door_silence_must_outlast_a_call() -> None:
    """`door_silence_s` is also the main listener's read timeout, so a shorter one
    cut `/mcp` calls still waiting for their box (the client got no answer at all)."""
    assert Config().door_silence_s >= Config().call_deadline_s + 2
    Config(door_silence_s=10, call_deadline_s=8)
    with pytest.raises(pydantic.ValidationError, match=r"door_silence_s .* call_deadline_s"):
        Config(door_silence_s=5, call_deadline_s=8)
    with pytest.raises(ConfigError, match="door_silence_s"):
        load_config(env={"FTWBRIDGE_CALL_DEADLINE_S": "60"})


def test_every_limit_refuses_nonsense() -> None:
    """A negative deadline, a zero rate, a burst below 1 or a count of 0 is refused
    at load, for every limit, not found out at the first call."""
    nonsense: dict[str, list[object]] = {}
    for name, field in Config.model_fields.items():
        if name.endswith("_per_s"):
            nonsense[name] = [0, -1]
        elif name.endswith("_burst"):
            nonsense[name] = [0, 0.5] if field.annotation is float else [0]
        elif name.endswith("_s"):
            nonsense[name] = [-1] if name in ("pace_wait_s", "drain_s") else [0, -1]
        elif name in ("calls_in_flight", "warm_sessions", "sessions_per_home", "max_body_bytes"):
            nonsense[name] = [0]
        elif name in ("queue_per_home", "clock_skew_max_ms"):
            nonsense[name] = [-1]
    assert len(nonsense) >= 26  # every limit of the model is listed above
    for name, values in nonsense.items():
        for value in values:
            with pytest.raises(ConfigError, match=name):
                load_config(env={f"FTWBRIDGE_{name.upper()}": str(value)})


def test_unknown_keys_name_the_nearest(tmp_path: Path) -> None:
    cfg = tmp_path / "bridge.toml"
    cfg.write_text("call_deadline = 5\n")
    with pytest.raises(ConfigError, match="did you mean 'call_deadline_s'"):
        load_config(cfg, env={})
    cfg.write_text("zzz = 5\n")
    with pytest.raises(ConfigError, match="unknown key 'zzz'; see the configuration keys"):
        load_config(cfg, env={})


def test_relative_paths_in_a_file_are_the_files(tmp_path: Path) -> None:
    cfg = tmp_path / "etc" / "bridge.toml"
    cfg.parent.mkdir()
    cfg.write_text('state_dir = "state"\nkeys_socket = "run/keys.sock"\n')
    config = load_config(cfg, env={})
    assert config.state_dir == tmp_path / "etc" / "state"
    assert config.keys_socket == tmp_path / "etc" / "run" / "keys.sock"
    cfg.write_text(f'state_dir = "{tmp_path}/abs"\nkeys_socket = "none"\n')
    config = load_config(cfg, env={})
    assert config.state_dir == tmp_path / "abs"
    assert config.keys_socket is None
    # a variable is read from the current folder, and wins over the file
    assert load_config(cfg, env={"FTWBRIDGE_STATE_DIR": "here"}).state_dir == Path("here")


@pytest.mark.parametrize(
    ("bind", "url"),
    [
        ("127.0.0.1:9000", "http://127.0.0.1:9000"),
        ("127.0.0.1:0", "http://127.0.0.1:0"),
        ("0.0.0.0:9000", "http://127.0.0.1:9000"),
        ("[::]:9000", "http://[::1]:9000"),
        ("[::1]:9000", "http://[::1]:9000"),
        ("bridge.example:9000", "http://bridge.example:9000"),
        (":9000", "http://127.0.0.1:9000"),
    ],
)
def test_public_url_follows_bind(bind: str, url: str) -> None:
    assert Config(bind=bind).site_url == url
    assert Config(bind=bind, public_url="https://b.example").site_url == "https://b.example"


def test_public_url_warning() -> None:
    """Warned: a loopback URL on a bind that listens beyond the machine. Not warned: anything
    a proxy in front could explain."""
    assert Config().url_warning() is None
    assert Config(bind="0.0.0.0:8780", public_url="https://b.example").url_warning() is None
    assert Config(bind="127.0.0.1:8780", public_url="https://b.example").url_warning() is None
    assert Config(bind="[::1]:1", public_url="http://localhost:1").url_warning() is None
    for bind in ("0.0.0.0:8780", "[::]:8780", "192.0.2.7:8780"):
        for url in ("http://127.0.0.1:8780", "http://localhost:8780", "http://[::1]:8780"):
            warning = Config(bind=bind, public_url=url).url_warning()
            assert warning is not None and "loopback address" in warning
    unset = Config(bind="0.0.0.0:8780").url_warning()
    assert unset is not None and "not set, so taken from bind" in unset


def test_toml_errors_are_one_sentence(tmp_path: Path) -> None:
    cfg = tmp_path / "bridge.toml"
    cfg.write_text('bind = "x\n')
    with pytest.raises(ConfigError, match=r"is not valid TOML at line 1, column \d+"):
        load_config(cfg, env={})
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "missing.toml", env={})
    with pytest.raises(ConfigError, match="is a folder, not a file"):
        load_config(tmp_path, env={})


def test_forwarding_settings() -> None:
    """`internal_bind` needs a shared database and key; `mesh_key` is 32
    bytes as hex or base64 and never repeated in an error; unset, nothing is forwarded."""
    assert Config().internal_bind is None and Config().internal_site_url is None
    key = "ab" * 32
    url = "postgresql://u@h/db"
    c = Config(database_url=url, mesh_key=key, internal_bind="0.0.0.0:0", instance_id="b-1")
    assert c.internal_site_url == "http://127.0.0.1:0" and c.instance_name(1) == "b-1"
    assert Config().instance_name(8780).endswith("-8780")
    with pytest.raises(pydantic.ValidationError, match="internal_bind needs database_url"):
        Config(mesh_key=key, internal_bind="127.0.0.1:0")
    with pytest.raises(pydantic.ValidationError, match="needs mesh_key"):
        Config(database_url=url, internal_bind="127.0.0.1:0")
    with pytest.raises(ConfigError, match="mesh_key must be 32 random bytes") as err:
        load_config(env={"FTWBRIDGE_MESH_KEY": "cd" * 31})
    assert "cd" * 31 not in str(err.value)
    assert load_config(env={"FTWBRIDGE_MESH_KEY": "A" * 43 + "="}).mesh_key == "A" * 43 + "="
    with pytest.raises(ConfigError, match="instance_id must be 1 to 64"):
        load_config(env={"FTWBRIDGE_INSTANCE_ID": "a b"})


def test_keep_alive_is_a_setting() -> None:
    """An HTTP/1.1 connection idle for `keep_alive_s` is closed (hypercorn's default, 5 s,
    unless set); a proxy in front must drop its idle connections sooner (docs/operations.md,
    "Keep-alive behind a proxy")."""
    assert Config().keep_alive_s == HypercornConfig().keep_alive_timeout == 5
    assert load_config(env={"FTWBRIDGE_KEEP_ALIVE_S": "75"}).keep_alive_s == 75


def test_the_internal_listener_s_tls_files_go_together_and_make_its_url_https(
    tmp_path: Path,
) -> None:
    base = {
        "state_dir": tmp_path,
        "database_url": "postgresql://x@127.0.0.1/db",
        "mesh_key": "00" * 32,
        "internal_bind": "127.0.0.1:8782",
    }
    assert Config(**base).internal_site_url == "http://127.0.0.1:8782"
    tls = Config(**base, internal_certfile=tmp_path / "c.pem", internal_keyfile=tmp_path / "k")
    assert tls.internal_site_url == "https://127.0.0.1:8782"
    with pytest.raises(pydantic.ValidationError, match="go together"):
        Config(**base, internal_certfile=tmp_path / "c.pem")


def test_the_door_always_has_its_own_listener() -> None:
    """`door_bind` has a default (deploy/'s 127.0.0.1:8783, next to the main 8780 and the
    admin 8781), and no value turns it off: the main listener refuses `/v1/box`."""
    assert Config().door_bind == "127.0.0.1:8783"
    assert load_config(env={}).door_bind == "127.0.0.1:8783"
    for off in ("none", "", " None "):
        with pytest.raises(ConfigError, match="door_bind must be a host:port: the door always"):
            load_config(env={"FTWBRIDGE_DOOR_BIND": off})
    with pytest.raises(pydantic.ValidationError):
        Config(door_bind=None)  # type: ignore[arg-type]
