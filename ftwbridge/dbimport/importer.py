"""`ftwbridge db import`: an embedded bridge's state carried into PostgreSQL (docs/operations.md,
"Moving from one process").

What is read (`dbimport.embedded`): `state_dir/bridge.sqlite` (homes, rosters, access-token
hashes, OAuth clients, refresh-token hashes, and agents' keys sealed there when the embedded
keys part ran with `kek`) and the agent keys file (`state_dir/agent-keys.json` by default),
in one read transaction, while `state_dir`'s in-use lock is held exclusively (`store.inuse`):
no bridge serves on it meanwhile. What is written: the same rows in the PostgreSQL of
`database_url`, agents' private keys sealed under `kek` bound to their home exactly as a keys
service seals them (`keys.sealed.seal_key`), all in one transaction, so a failure changes
nothing.

Rules, decided per home from what both sides hold (the rosters by `decide_roster`, pure):
- A home enrolled on PostgreSQL with another key is left as it is there, with nothing of it
  copied (it was re-enrolled there: a later, deliberate act).
- Rosters are compared by `seq`, the version a home's owner signs, read from each roster's
  verified signed body, never from the `seq` column stored beside it (only signed data
  decides, docs/operations.md): the newer one stays; on a tie PostgreSQL's stays. A roster
  that does not verify with the home's key counts as none: an embedded one is not copied, and
  PostgreSQL's is replaced by the embedded one that does verify. When the embedded one is newer it replaces PostgreSQL's, and agents
  that the older one listed and the newer does not lose what the bridge takes from a dropped
  agent: their tokens are withdrawn, their refresh tokens and keys deleted.
- An agent's key, tokens and refresh tokens are copied when the winning roster lists the agent;
  access tokens of agents it does not list are copied withdrawn (the bridge then says why they
  no longer work); keys and refresh tokens of unlisted agents (a sign-in never completed, an
  agent dropped) and anything expired are not copied.
- Rows already on PostgreSQL (the same token hash, client id, agent key) are left alone, so a
  second run copies nothing and fails on nothing.
Pending sign-ins, authorization codes and claim offers are not copied.

Blocking work (sqlite3, psycopg) runs in one worker thread (`import_embedded`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nacl.secret
import trio

from ftwbridge.keys.sealed import open_sealed
from ftwbridge.keys.service import KeysError
from ftwbridge.store.base import StoreError
from ftwbridge.store.inuse import StateInUse, importing_state
from ftwbridge.store.migrate import bundled
from ftwbridge.store.sealed import SealedKey

from .embedded import KEYS_FILE, Embedded, ImportRefused, read_embedded
from .writes import Tally, decide_roster, write_embedded

__all__ = ["ImportRefused", "Tally", "decide_roster", "import_embedded", "write_postgres"]

CONNECT_S = 10
"""The longest the connection to PostgreSQL may take to be made (libpq's `connect_timeout`),
seconds."""


async def import_embedded(
    state_dir: Path,
    *,
    database_url: str,
    kek: bytes,
    keys_file: Path | None = None,
    dry_run: bool = False,
    now_ms: int | None = None,
) -> Tally:
    """Copy the embedded state in `state_dir` (and `keys_file`, default
    `state_dir/agent-keys.json`) into `database_url`'s PostgreSQL, agents' keys sealed under
    `kek` (32 bytes); with `dry_run`, do it all in a transaction that is rolled back. Rows that
    expire at or before `now_ms` (ms since the epoch; default: the wall clock) are not copied.
    Holds `state_dir`'s lock throughout.

    Raises:
        ImportRefused: a bridge serves on `state_dir`; the state is missing or damaged, or
            `keys_file`, when named, is not there; `kek` does not open keys sealed in the
            state or on PostgreSQL; the database does not answer, is not migrated, or
            refused a write (nothing was changed).
    """
    box = nacl.secret.SecretBox(kek)
    now = time.time_ns() // 1_000_000 if now_ms is None else now_ms
    keys_path = keys_file if keys_file is not None else Path(state_dir) / KEYS_FILE

    def work() -> Tally:
        with _held(Path(state_dir)):
            if keys_file is not None and not keys_path.is_file():  # named: it must be there
                raise ImportRefused(
                    f"there is no agent keys file {keys_path}: name the file the embedded"
                    " keys part kept, or leave out --keys-file"
                )
            embedded = read_embedded(Path(state_dir), keys_path, box)
            return write_postgres(database_url, embedded, box, now_ms=now, dry_run=dry_run)

    return await trio.to_thread.run_sync(work)


@contextlib.contextmanager
def _held(state_dir: Path) -> Iterator[None]:
    if not state_dir.is_dir():
        raise ImportRefused(
            f"there is no state folder {state_dir}: point --state-dir (or state_dir) at the"
            " folder the embedded bridge used"
        )
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(importing_state(state_dir))
        except StateInUse as exc:
            raise ImportRefused(str(exc)) from None
        except OSError as exc:
            raise ImportRefused(
                f"the state folder {state_dir} cannot be locked for the import:"
                f" {exc.strerror or exc}"
            ) from None
        yield


def write_postgres(
    url: str, embedded: Embedded, box: nacl.secret.SecretBox, *, now_ms: int, dry_run: bool
) -> Tally:
    """Write `embedded` into `url`'s database in one transaction (rolled back when `dry_run`);
    blocking. See the module docstring for the rules.

    Raises:
        ImportRefused: the database does not answer, is not migrated, holds agent keys `box`
            does not open, or refused a statement (then nothing was written).
    """
    import psycopg

    from ftwbridge.store.postgres import describe, first_line, unreachable

    try:
        where = describe(url)
    except StoreError as exc:
        raise ImportRefused(str(exc), setting="database_url") from None
    try:
        with psycopg.connect(url, autocommit=True, connect_timeout=CONNECT_S) as conn:
            _check_migrated(conn, where)
            _check_kek(conn, box, where)
            with conn.transaction(force_rollback=dry_run):
                return write_embedded(conn, embedded, box, now_ms)
    except psycopg.OperationalError as exc:
        raise ImportRefused(unreachable(where, exc), setting="database_url") from None
    except psycopg.Error as exc:
        raise ImportRefused(
            f"the import into {where} failed and changed nothing: {first_line(exc)}"
        ) from None


def _check_migrated(conn: Any, where: str) -> None:
    known = conn.execute("SELECT to_regclass('schema_migrations')").fetchone()[0]
    have = (
        {int(r[0]) for r in conn.execute("SELECT version FROM schema_migrations")}
        if known is not None
        else set()
    )
    missing = [m.name for m in bundled() if m.version not in have]
    if missing:
        raise ImportRefused(
            f"{where} is not migrated (it lacks {', '.join(missing)}): run `ftwbridge db"
            " migrate` with the same configuration first"
        )


def _check_kek(conn: Any, box: nacl.secret.SecretBox, where: str) -> None:
    row = conn.execute("SELECT public_key, home, sealed, listed FROM agent_keys LIMIT 1").fetchone()
    if row is None:
        return
    try:
        open_sealed(box, SealedKey(bytes(row[0]), str(row[1]), bytes(row[2]), bool(row[3])))
    except KeysError:
        raise ImportRefused(
            f"kek does not open the agent keys {where} holds (the keys services sealed them"
            " under another kek): give the import the keys services' kek",
            setting="kek",
        ) from None
