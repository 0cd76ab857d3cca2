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
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import nacl.secret
import trio

from ftwbridge.keys.sealed import open_sealed, seal_key
from ftwbridge.keys.service import KeysError
from ftwbridge.proto.roster import Roster, RosterRefused, verify_roster
from ftwbridge.store.base import StoreError
from ftwbridge.store.inuse import StateInUse, importing_state
from ftwbridge.store.migrate import bundled
from ftwbridge.store.sealed import SealedKey

from .embedded import KEYS_FILE, Embedded, ImportRefused, read_embedded

__all__ = ["ImportRefused", "Tally", "decide_roster", "import_embedded", "write_postgres"]

CONNECT_S = 10
"""The longest the connection to PostgreSQL may take to be made (libpq's `connect_timeout`),
seconds."""
KINDS = ("homes", "rosters", "access tokens", "refresh tokens", "OAuth clients", "agent keys")
"""What is counted, in the summary's order."""


@dataclass(slots=True)
class Tally:
    """What an import copied (or, in a dry run, would copy), per kind of `KINDS`."""

    copied: Counter[str] = field(default_factory=Counter)
    present: Counter[str] = field(default_factory=Counter)
    """Rows PostgreSQL already had (a second run finds everything here)."""
    expired: int = 0
    unlisted: int = 0
    """Agent keys and refresh tokens not copied: the home's winning roster does not list
    their agent."""
    withdrawn: int = 0
    """Access tokens copied withdrawn: the home's winning roster does not list their agent."""
    kept_newer: list[str] = field(default_factory=list)
    """Homes whose roster on PostgreSQL is as new as the embedded one or newer (kept)."""
    replaced: list[str] = field(default_factory=list)
    """Homes whose older roster on PostgreSQL the embedded one replaced."""
    other_key: list[str] = field(default_factory=list)
    """Homes enrolled on PostgreSQL with another key: nothing of them copied."""
    unverified: list[str] = field(default_factory=list)
    """Homes whose embedded roster does not verify with the home's key: not copied."""

    def summary(self, *, dry_run: bool) -> str:
        """One line of counts: `imported homes 1, rosters 1, ...; already there 0; ...`
        (`would import ...` for a dry run)."""
        verb = "would import" if dry_run else "imported"
        copied = ", ".join(f"{k} {self.copied[k]}" for k in KINDS)
        return (
            f"{verb} {copied}; already there {sum(self.present.values())};"
            f" not copied: expired {self.expired}, of agents no roster lists {self.unlisted};"
            f" access tokens copied withdrawn {self.withdrawn};"
            f" PostgreSQL's roster kept for {len(self.kept_newer)} homes,"
            f" replaced for {len(self.replaced)}; homes enrolled there with another key,"
            f" left alone {len(self.other_key)}"
        )

    def notes(self) -> list[str]:
        """One line per home decided other than by a plain copy (names, never keys)."""
        lines = [f"home {h}: PostgreSQL's roster is as new or newer; kept" for h in self.kept_newer]
        lines += [f"home {h}: PostgreSQL's older roster replaced" for h in self.replaced]
        lines += [
            f"home {h}: enrolled on PostgreSQL with another key; left as it is there"
            for h in self.other_key
        ]
        lines += [
            f"home {h}: its roster does not verify with its key; the box sends it again"
            for h in self.unverified
        ]
        return lines


def decide_roster(
    ours: Roster | None, theirs: Roster | None, *, theirs_stored: bool = False
) -> Literal["copy", "same", "keep", "replace", "none"]:
    """Which of a home's rosters stays: the embedded one (`ours`) or PostgreSQL's (`theirs`),
    each verified with the home's key (`verify_roster`), or None when there is none or it does
    not verify; `theirs_stored`: PostgreSQL has a row (that may not verify). `copy`: only ours,
    and no row there; `replace`: ours is newer by its signed `seq`, or theirs does not verify;
    `keep`: theirs is as new or newer (a tie keeps PostgreSQL's, which instances serve);
    `same`: the same bytes; `none`: neither verifies. Pure."""
    if ours is None:
        return "none" if theirs is None else "keep"
    if theirs is None:
        return "replace" if theirs_stored else "copy"
    if ours.signed == theirs.signed:
        return "same"
    return "replace" if ours.seq > theirs.seq else "keep"


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
                return _write(conn, embedded, box, now_ms)
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


def _verified(signed: bytes | None, home: str, key: bytes) -> Roster | None:
    """The roster `signed`, verified with `key` for `home`, or None (none, or it does not
    verify)."""
    if signed is None:
        return None
    try:
        return verify_roster(signed, home_key=key, home=home)
    except RosterRefused:
        return None


def _listed(roster: Roster | None) -> frozenset[bytes]:
    return frozenset() if roster is None else frozenset(roster.agents())


class _Insert:
    """`INSERT ... ON CONFLICT DO NOTHING`, each row counted in `tally` as copied or present."""

    def __init__(self, conn: Any, tally: Tally) -> None:
        self._conn = conn
        self._tally = tally

    def __call__(self, kind: str, sql: str, args: tuple[Any, ...]) -> None:
        done = self._conn.execute(sql + " ON CONFLICT DO NOTHING", args).rowcount
        (self._tally.copied if done else self._tally.present)[kind] += 1


def _write(conn: Any, embedded: Embedded, box: nacl.secret.SecretBox, now_ms: int) -> Tally:
    """Write `embedded` into PostgreSQL in the caller's transaction: each home and its roster
    first, then what the winning rosters list (tokens, refresh tokens, clients, keys)."""
    tally = Tally()
    insert = _Insert(conn, tally)
    listed: dict[str, frozenset[bytes]] = {}  # home -> agents its winning roster lists
    for home, key in sorted(embedded.homes.items()):
        stored = embedded.rosters.get(home)  # its `seq` column is not read: the signed one is
        agents = _write_home(conn, insert, tally, home, key, None if stored is None else stored[1])
        if agents is not None:
            listed[home] = agents
    _write_tokens(insert, tally, embedded, listed, now_ms)
    _write_rest(insert, tally, embedded, listed, box, now_ms)
    return tally


def _write_home(
    conn: Any, insert: _Insert, tally: Tally, home: str, key: bytes, signed: bytes | None
) -> frozenset[bytes] | None:
    """Write one home and the newer of its two rosters (`decide_roster`); returns the agents
    the winning roster lists, or None when PostgreSQL holds the home under another key."""
    row = conn.execute(
        "SELECT public_key FROM homes WHERE home = %s FOR UPDATE", (home,)
    ).fetchone()
    if row is not None and bytes(row[0]) != key:
        tally.other_key.append(home)
        return None
    insert("homes", "INSERT INTO homes VALUES (%s, %s)", (home, key))
    ours = _verified(signed, home, key)
    if signed is not None and ours is None:
        tally.unverified.append(home)
    found = conn.execute(
        "SELECT signed FROM rosters WHERE home = %s FOR UPDATE", (home,)
    ).fetchone()
    theirs = None if found is None else _verified(bytes(found[0]), home, key)
    decision = decide_roster(ours, theirs, theirs_stored=found is not None)
    if decision == "copy" and ours is not None:
        insert("rosters", "INSERT INTO rosters VALUES (%s, %s, %s)", (home, ours.seq, ours.signed))
    elif decision == "same":
        tally.present["rosters"] += 1
    elif decision == "keep":
        tally.kept_newer.append(home)
    elif decision == "replace" and ours is not None:
        conn.execute(
            "UPDATE rosters SET seq = %s, signed = %s WHERE home = %s",
            (ours.seq, ours.signed, home),
        )
        tally.copied["rosters"] += 1
        tally.replaced.append(home)
        _withdraw(conn, home, _listed(theirs) - _listed(ours))
    return _listed(ours if decision in ("copy", "same", "replace") else theirs)


def _withdraw(conn: Any, home: str, dropped: frozenset[bytes]) -> None:
    """What the bridge's roster applier does for agents a newer roster dropped: their access
    tokens withdrawn, their refresh tokens and keys deleted."""
    for agent in sorted(dropped):
        conn.execute(
            "UPDATE tokens SET withdrawn = TRUE WHERE home = %s AND agent_key = %s",
            (home, agent),
        )
        conn.execute(
            "DELETE FROM refresh_tokens WHERE record ->> 'home' = %s"
            " AND record ->> 'agentKey' = %s",
            (home, agent.hex()),
        )
        conn.execute("DELETE FROM agent_keys WHERE home = %s AND public_key = %s", (home, agent))


def _write_tokens(
    insert: _Insert,
    tally: Tally,
    embedded: Embedded,
    listed: dict[str, frozenset[bytes]],
    now_ms: int,
) -> None:
    """The access tokens of listed homes that have not expired, withdrawn when their agent is
    no longer listed."""
    for token_hash, r in embedded.tokens:
        if r.home not in listed:
            tally.unlisted += 1
        elif r.expires_at_ms <= now_ms:
            tally.expired += 1
        else:
            withdrawn = r.withdrawn or r.agent_key not in listed[r.home]
            tally.withdrawn += withdrawn and not r.withdrawn
            insert(
                "access tokens",
                "INSERT INTO tokens VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
                (
                    *(token_hash, r.home, r.agent_id, r.agent_key, list(r.scopes)),
                    *(r.resource, r.client, r.expires_at_ms, withdrawn),
                ),
            )


def _write_rest(
    insert: _Insert,
    tally: Tally,
    embedded: Embedded,
    listed: dict[str, frozenset[bytes]],
    box: nacl.secret.SecretBox,
    now_ms: int,
) -> None:
    """The refresh tokens and agent keys of listed agents, and the OAuth clients, that have
    not expired; the keys sealed with `box`."""
    from psycopg.types.json import Jsonb

    for f in embedded.refresh:
        of_home, agent_hex = str(f.record.get("home")), str(f.record.get("agentKey"))
        if f.expires_at_ms <= now_ms:
            tally.expired += 1
        elif agent_hex not in {k.hex() for k in listed.get(of_home, frozenset())}:
            tally.unlisted += 1
        else:
            insert(
                "refresh tokens",
                "INSERT INTO refresh_tokens VALUES (%s, %s, %s, %s, %s)",
                (f.token_hash, f.family, f.used, Jsonb(f.record), f.expires_at_ms),
            )
    for client_id, metadata, expires_at_ms in embedded.clients:
        if expires_at_ms <= now_ms:
            tally.expired += 1
        else:
            insert(
                "OAuth clients",
                "INSERT INTO oauth_clients VALUES (%s, %s, %s)",
                (client_id, Jsonb(metadata), expires_at_ms),
            )
    for k in embedded.keys:
        if k.public not in listed.get(k.home, frozenset()):
            tally.unlisted += 1
        else:
            insert(
                "agent keys",
                "INSERT INTO agent_keys VALUES (%s, %s, %s, TRUE)",
                (k.public, k.home, seal_key(box, k.private, k.home)),
            )
