"""Secrets from files: `mesh_key_file`, `kek_file`, `database_url_file` and `secrets_dir`,
each unusable file refused in one sentence that names the setting and the file, never the
secret (docs/operations.md, "Secrets in files")."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ftwbridge.config import ConfigError, load_config

MESH = "ab" * 32
KEK = "cd" * 32
URL = "postgresql://bridge:pw-in-a-file@db:5432/bridge"


def write(path: Path, text: str | bytes, mode: int = 0o600) -> Path:
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    path.chmod(mode)
    return path


def test_each_secret_comes_from_its_file_relative_to_the_config(tmp_path: Path) -> None:
    write(tmp_path / "mesh.key", MESH + "\n")
    write(tmp_path / "kek", f"  {KEK}\n\n")
    write(tmp_path / "db", URL + "\n")
    cfg = tmp_path / "bridge.toml"
    cfg.write_text('mesh_key_file = "mesh.key"\nkek_file = "kek"\ndatabase_url_file = "db"\n')
    config = load_config(cfg, env={})
    assert (config.mesh_key, config.kek, config.database_url) == (MESH, KEK, URL)
    assert config.mesh_key_file == tmp_path / "mesh.key"


def test_a_variable_names_the_file_too(tmp_path: Path) -> None:
    path = write(tmp_path / "mesh", MESH)
    config = load_config(env={"FTWBRIDGE_MESH_KEY_FILE": str(path)})
    assert config.mesh_key == MESH


def test_a_secrets_folder_fills_in_what_is_not_given(tmp_path: Path) -> None:
    folder = tmp_path / "credentials"
    folder.mkdir()
    write(folder / "mesh_key", MESH)
    write(folder / "kek", KEK)
    config = load_config(env={"FTWBRIDGE_SECRETS_DIR": str(folder), "FTWBRIDGE_KEK": "ef" * 32})
    assert config.mesh_key == MESH and config.kek == "ef" * 32 and config.database_url is None


@pytest.mark.parametrize(
    ("setup", "words"),
    [
        (lambda p: None, "does not exist"),
        (lambda p: p.mkdir(), "is a folder, not a file"),
        (lambda p: write(p, ""), "is empty"),
        (lambda p: write(p, " \n"), "is empty"),
        (lambda p: write(p, b"\xff\xfe" + MESH.encode()), "is not UTF-8 text"),
        (lambda p: write(p, "x" * 5000), "is larger than 4096 bytes"),
    ],
    ids=["missing", "folder", "empty", "blank", "not-utf8", "too-large"],
)
def test_an_unusable_file_is_one_sentence(tmp_path: Path, setup, words: str) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "mesh"
    setup(path)
    with pytest.raises(ConfigError) as caught:
        load_config(env={"FTWBRIDGE_MESH_KEY_FILE": str(path)})
    assert str(caught.value).startswith(f"mesh_key_file is read from {path}, which {words}")
    assert "\n" not in str(caught.value)


def test_an_unreadable_file_says_why(tmp_path: Path) -> None:
    path = write(tmp_path / "mesh", MESH, mode=0o000)
    argv = [sys.executable, "-m", "ftwbridge", "config", "check"]
    if os.geteuid() == 0:  # root reads any file: run as nobody to see what an operator sees
        argv = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", *argv]
    env = os.environ | {"FTWBRIDGE_MESH_KEY_FILE": str(path)}
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60, check=False)
    assert done.returncode == 2
    assert done.stderr == (
        f"ftwbridge: mesh_key_file is read from {path}, which cannot be read: Permission denied\n"
    )


def test_a_wrong_value_names_the_file_and_never_shows_it(tmp_path: Path) -> None:
    path = write(tmp_path / "mesh", "not-a-key-at-all\n")
    with pytest.raises(ConfigError) as caught:
        load_config(env={"FTWBRIDGE_MESH_KEY_FILE": str(path)})
    text = str(caught.value)
    assert text.startswith("mesh_key ") and f"in {path} (mesh_key_file in the environment" in text
    assert "not-a-key-at-all" not in text


def test_both_the_secret_and_its_file_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path / "mesh", MESH)
    cfg = tmp_path / "bridge.toml"
    cfg.write_text(f'mesh_key = "{MESH}"\n')
    with pytest.raises(ConfigError) as caught:
        load_config(cfg, env={"FTWBRIDGE_MESH_KEY_FILE": str(path)})
    assert str(caught.value) == (
        f"mesh_key is set in {cfg} and mesh_key_file in the environment variable"
        " FTWBRIDGE_MESH_KEY_FILE; set only one of them"
    )


def test_a_secrets_dir_that_is_no_folder_is_refused(tmp_path: Path) -> None:
    with pytest.raises(
        ConfigError,
        match=r"secrets_dir .*/nope \(from the environment variable FTWBRIDGE_SECRETS_DIR\) is not a folder",
    ):
        load_config(env={"FTWBRIDGE_SECRETS_DIR": str(tmp_path / "nope")})
