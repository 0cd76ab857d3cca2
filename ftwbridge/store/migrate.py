"""Schema migrations for the PostgreSQL store: plain SQL files applied in order.

The files are `ftwbridge/store/migrations/NNNN_words.sql`, shipped with the package; `NNNN`
is the version. The database keeps the versions it has in `schema_migrations`. `apply` takes a
transaction-scoped advisory lock first, so instances that start at once migrate one after the
other and the later ones find nothing left to do; every pending file then runs in that one
transaction (PostgreSQL's DDL is transactional), so a failure leaves the schema as it was.
docs/operations.md, "Many instances", says why this and not a migrations library.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

from .base import StoreError

MIGRATION_LOCK = int.from_bytes(b"ftwbridg", "big")
"""The `pg_advisory_xact_lock` key that serialises migrations across instances."""
FILE_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
"""A migration's file name: four digits of version, then words in snake case."""


@dataclass(frozen=True, slots=True)
class Migration:
    """One SQL file: its `version` (the file's number), `name` (the file's name) and `sql`."""

    version: int
    name: str
    sql: str


@dataclass(frozen=True, slots=True)
class Outcome:
    """What `apply` did: the names of the files it `applied` (in order), and the versions the
    database has that this bridge does not know (`unknown`: a newer bridge migrated it)."""

    applied: tuple[str, ...]
    unknown: tuple[int, ...]


def bundled() -> list[Migration]:
    """The package's migrations, in version order.

    Raises:
        StoreError: a file's name is not `NNNN_words.sql`, or two files share a version (a
            packaging mistake, said before anything is applied).
    """
    found: dict[int, Migration] = {}
    for entry in resources.files("ftwbridge.store").joinpath("migrations").iterdir():
        if not entry.name.endswith(".sql"):
            continue
        match = FILE_NAME.match(entry.name)
        if match is None:
            raise StoreError(f"the migration file {entry.name} is not named NNNN_words.sql")
        version = int(match.group(1))
        if version in found:
            raise StoreError(
                f"the migration files {found[version].name} and {entry.name} share version"
                f" {version}"
            )
        found[version] = Migration(version, entry.name, entry.read_text("utf-8"))
    return [found[v] for v in sorted(found)]


def plan(known: Sequence[Migration], applied: Collection[int]) -> tuple[list[Migration], list[int]]:
    """Which of `known` to apply, in order, given the versions a database has `applied`; and
    which applied versions are not `known` (sorted). Pure: no database."""
    known_versions = {m.version for m in known}
    todo = [m for m in sorted(known, key=lambda m: m.version) if m.version not in applied]
    return todo, sorted(v for v in applied if v not in known_versions)


def apply(conn: Any, migrations: Sequence[Migration] | None = None) -> Outcome:
    """Bring the database of `conn` (a psycopg 3 connection, not in a transaction) up to date
    with `migrations` (default: `bundled()`). Blocking: run it in a worker thread.

    Raises:
        psycopg.Error: a file's SQL failed, or the connection broke; nothing was applied.
    """
    wanted = bundled() if migrations is None else list(migrations)
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
        conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY,"
            " name TEXT NOT NULL, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())"
        )
        applied = {int(row[0]) for row in conn.execute("SELECT version FROM schema_migrations")}
        todo, unknown = plan(wanted, applied)
        for migration in todo:
            conn.execute(migration.sql.encode("utf-8"))  # bytes: `%` is not a placeholder
            conn.execute(
                "INSERT INTO schema_migrations (version, name) VALUES (%s, %s)",
                (migration.version, migration.name),
            )
    return Outcome(tuple(m.name for m in todo), tuple(unknown))
