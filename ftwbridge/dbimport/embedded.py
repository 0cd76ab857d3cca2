"""The embedded bridge's state as `ftwbridge db import` reads it (`dbimport.importer`): one
read-only SQLite transaction over `state_dir/bridge.sqlite`, then the agent keys file. Blocking:
the importer runs it in a worker thread.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nacl.secret
from nacl.public import PrivateKey

from ftwbridge.keys.keyfile import StateFileError, read_json
from ftwbridge.keys.sealed import open_sealed
from ftwbridge.keys.service import KeysError
from ftwbridge.lifecycle import StartupError
from ftwbridge.store import sqlite_path
from ftwbridge.store.base import TokenRecord
from ftwbridge.store.sealed import SealedKey

KEYS_FILE = "agent-keys.json"
"""The embedded keys part's file in `state_dir` (`run.keys_part`)."""


class ImportRefused(StartupError):
    """The import cannot run or failed, and changed nothing on PostgreSQL; the message is one
    sentence for the operator (the command line prints it and exits with status 2)."""


@dataclass(frozen=True, slots=True)
class AgentKey:
    """An agent's X25519 key pair as the embedded keys part held it: `public` and `private`
    (32 bytes each), its `home`."""

    public: bytes
    home: str
    private: bytes


@dataclass(frozen=True, slots=True)
class RefreshRow:
    """A refresh token's row: its SHA-256 (`token_hash`, 32 bytes), rotation `family`, whether
    it was `used`, its `record` (JSON: `home`, `agentKey` hex, ...), `expires_at_ms`."""

    token_hash: bytes
    family: str
    used: bool
    record: dict[str, Any]
    expires_at_ms: int


@dataclass(frozen=True, slots=True)
class Embedded:
    """One consistent read of an embedded bridge's state. Times in ms since the epoch."""

    homes: dict[str, bytes]
    """home -> its Ed25519 public key (32 bytes)."""
    rosters: dict[str, tuple[int, bytes]]
    """home -> (seq, SignedRoster bytes)."""
    tokens: list[tuple[bytes, TokenRecord]]
    """(SHA-256 of the token, its binding)."""
    clients: list[tuple[str, dict[str, Any], int]]
    """(client id, RFC 7591 metadata, expires_at_ms)."""
    refresh: list[RefreshRow]
    keys: list[AgentKey]


def read_embedded(state_dir: Path, keys_file: Path, box: nacl.secret.SecretBox) -> Embedded:
    """Read the embedded state (blocking): the SQLite file read-only in one transaction, then
    the keys file; keys sealed in SQLite are opened with `box`.

    Raises:
        ImportRefused: no `bridge.sqlite`; it or the keys file is damaged; `box` does not open
            a key sealed in SQLite.
    """
    database = sqlite_path(state_dir)
    if not database.is_file():
        raise ImportRefused(
            f"there is no embedded bridge state in {state_dir} (no bridge.sqlite there): point"
            " --state-dir (or state_dir) at the folder the embedded bridge used"
        )
    try:
        embedded, sealed = _read_sqlite(database)
    except sqlite3.Error as exc:
        raise ImportRefused(
            f"the database {database} cannot be read ({exc}); restore it from a backup"
        ) from None
    keys = _read_keys_file(keys_file)
    for row in sealed:
        try:
            keys.append(AgentKey(row.public, row.home, open_sealed(box, row)))
        except KeysError:
            raise ImportRefused(
                f"kek does not open the agent keys sealed in {database}: give the import the"
                " kek the embedded keys part used",
                setting="kek",
            ) from None
    embedded.keys.extend(keys)
    return embedded


def _blob(value: object) -> bytes:
    """A BLOB column's value. SQLite keeps any type in any column, and `bytes(n)` of an
    integer would be n zero bytes (a damaged row read as a key or hash, or gigabytes).

    Raises:
        TypeError: the value is not bytes (`_read_sqlite` reports the row as damaged).
    """
    if not isinstance(value, bytes):
        raise TypeError(f"a {type(value).__name__} where bytes belong")
    return value


def _read_sqlite(path: Path) -> tuple[Embedded, list[SealedKey]]:
    uri = f"{path.resolve().as_uri()}?mode=ro"  # read-only: the import never changes it
    db = sqlite3.connect(uri, uri=True, isolation_level=None)
    try:
        db.execute("BEGIN")  # one snapshot of every table
        tables = {
            str(r[0]) for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")
        }

        def rows(table: str, sql: str) -> list[Any]:
            return db.execute(sql).fetchall() if table in tables else []

        columns = {r[1] for r in db.execute("PRAGMA table_info(tokens)")}
        withdrawn = "withdrawn" if "withdrawn" in columns else "0"
        embedded = Embedded(
            homes={
                str(h): _blob(k) for h, k in rows("homes", "SELECT home, public_key FROM homes")
            },
            rosters={
                str(h): (int(s), _blob(b))
                for h, s, b in rows("rosters", "SELECT home, seq, signed FROM rosters")
            },
            tokens=[
                (_blob(t), TokenRecord(h, a, _blob(k), tuple(json.loads(s)), r, c, int(e), bool(w)))
                for t, h, a, k, s, r, c, e, w in rows(
                    "tokens",
                    "SELECT hash, home, agent_id, agent_key, scopes, resource, client,"
                    f" expires_at_ms, {withdrawn} FROM tokens",
                )
            ],
            clients=[
                (str(c), dict(json.loads(m)), int(e))
                for c, m, e in rows(
                    "oauth_clients", "SELECT client_id, metadata, expires_at_ms FROM oauth_clients"
                )
            ],
            refresh=[
                RefreshRow(_blob(t), str(f), bool(u), dict(json.loads(r)), int(e))
                for t, f, u, r, e in rows(
                    "refresh_tokens",
                    "SELECT hash, family, used, record, expires_at_ms FROM refresh_tokens",
                )
            ],
            keys=[],
        )
        sealed = [
            SealedKey(_blob(p), str(h), _blob(s), bool(listed))
            for p, h, s, listed in rows(
                "agent_keys", "SELECT public_key, home, sealed, listed FROM agent_keys"
            )
        ]
        db.execute("COMMIT")
    except (ValueError, TypeError, RecursionError) as exc:  # not JSON (or too deep), a NULL
        raise sqlite3.DatabaseError(f"a row is not the bridge's ({exc})") from None
    finally:
        db.close()
    return embedded, sealed


def _read_keys_file(path: Path) -> list[AgentKey]:
    """The keys of the embedded keys part's file (none when there is no file).

    Raises:
        ImportRefused: the file cannot be read, is not JSON, or holds something else than
            agent keys (a private key that does not give its public key included).
    """
    try:
        value = read_json(path)
    except StateFileError as exc:  # unreadable, not JSON, or nested too deep to parse
        raise ImportRefused(str(exc)) from None
    if value is None:
        return []
    keys: list[AgentKey] = []
    try:
        for public_hex, row in value.items():
            public, private = bytes.fromhex(public_hex), bytes.fromhex(row["private"])
            if len(private) != 32 or bytes(PrivateKey(private).public_key) != public:
                raise ValueError("a private key does not match its public key")
            keys.append(AgentKey(public, str(row["home"]), private))
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise ImportRefused(
            f"the agent keys file {path} does not hold agent keys ({exc}); restore it from a"
            " backup, or move it aside to import no agent keys"
        ) from None
    return keys
