"""`database_url` as an operator writes it: a PostgreSQL URL, "none" or "" for SQLite, and a
wrong one refused in one sentence that never repeats it (it may hold a password)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ftwbridge.config import ConfigError, load_config
from ftwbridge.store import SqliteStore, open_store


def test_database_url_is_a_postgresql_url_or_nothing(tmp_path: Path) -> None:
    url = "postgresql://ftw:pw@db.internal:5432/ftw?sslmode=verify-full"
    assert load_config(env={"FTWBRIDGE_DATABASE_URL": url}).database_url == url
    assert load_config(env={"FTWBRIDGE_DATABASE_URL": "postgres://db/ftw"}).database_url
    for off in ("", "none", " None "):
        assert load_config(env={"FTWBRIDGE_DATABASE_URL": off}).database_url is None
    toml = tmp_path / "bridge.toml"
    toml.write_text('database_url = "mysql://ftw:hunter2@db/ftw"\n')
    with pytest.raises(ConfigError) as refused:
        load_config(toml, env={})
    text = str(refused.value)
    assert text.startswith("database_url must be a PostgreSQL URL such as postgresql://")
    assert str(toml) in text and "hunter2" not in text and "\n" not in text


def test_no_database_url_keeps_sqlite_in_the_state_folder(tmp_path: Path) -> None:
    store = open_store(None, tmp_path / "state")
    try:
        assert isinstance(store, SqliteStore)
        assert (tmp_path / "state" / "bridge.sqlite").is_file()
    finally:
        store.close()
