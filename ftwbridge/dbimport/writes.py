"""db import's writes (`importer.write_postgres` runs them in one transaction): each home
with the newer of its two rosters, then what the winning rosters list (docs/operations.md,
"Moving from one process"), each row counted in a `Tally`."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Literal

import nacl.secret

from ftwbridge.keys.sealed import seal_key
from ftwbridge.proto.roster import Roster, RosterRefused, verify_roster

from .embedded import Embedded

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


def write_embedded(conn: Any, embedded: Embedded, box: nacl.secret.SecretBox, now_ms: int) -> Tally:
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
