"""What SQLite and PostgreSQL say differently, for `SqlStore` (`sql.py`): the `Dialect`
interface, and the shapes of a connection and its rows that both engines' drivers share.

A dialect's statement methods are blocking functions on a connection, in the engine's own
placeholders, which `SqlStore` runs in a worker thread; each is atomic against every other
connection. `SqliteDialect` is in `sqlite.py`, `PgDialect` in `postgres.py`.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

Found = list[tuple[str, dict[str, Any], int]]
"""Items of sign-in state as (key, record, expires_at_ms)."""


Matcher = Callable[[dict[str, Any]], bool]
"""Whether a record read back is one that was asked for."""


class Rows(Protocol):
    """What a statement gives back, on either engine (a DB-API cursor)."""

    @property
    def rowcount(self) -> int:
        """Rows the statement changed."""
        ...

    def fetchone(self) -> Any:
        """The next row as a tuple, or None."""
        ...

    def fetchall(self) -> list[Any]:
        """The remaining rows."""
        ...

    def __iter__(self) -> Iterator[Any]:
        """The remaining rows, one at a time."""
        ...


class Connection(Protocol):
    """One connection of either engine (`sqlite3.Connection`, `psycopg.Connection`)."""

    def execute(self, sql: str, args: Sequence[Any] = ..., /) -> Rows:
        """Run one statement in the engine's own placeholders."""
        ...


class Dialect(abc.ABC):
    """How one engine says what the two do not say alike."""

    @abc.abstractmethod
    def sql(self, statement: str) -> str:
        """`statement`, written with `?` placeholders, in this engine's placeholders."""

    @abc.abstractmethod
    def json(self, value: Any) -> Any:
        """A JSON value (dict or list) as a statement's parameter."""

    @abc.abstractmethod
    def unjson(self, value: Any) -> Any:
        """A JSON column's value as Python values."""

    @abc.abstractmethod
    def texts(self, values: list[str]) -> Any:
        """A list of text (a token's scopes) as a statement's parameter."""

    @abc.abstractmethod
    def untexts(self, value: Any) -> tuple[str, ...]:
        """A list-of-text column's value."""

    @abc.abstractmethod
    def json_text(self, column: str, field: str) -> str:
        """SQL for the text of the top-level `field` of the JSON in `column`."""

    @abc.abstractmethod
    def among(self, values: list[str]) -> Iterator[tuple[str, tuple[Any, ...]]]:
        """SQL tests that a column is one of `values` (to follow the column's name, with `?`
        placeholders), with their parameters: as many as the engine needs, none for none."""

    @abc.abstractmethod
    def matching(self, where: dict[str, Any]) -> tuple[str, tuple[Any, ...], Matcher]:
        """How a record is matched against `where` (`OAuthStore` semantics: every field of
        `where` present with the same value and type): a test to add to a `WHERE` clause
        (with `?` placeholders, starting with " AND ", or empty), its parameters, and a check
        for the rows it returns."""

    write_mark: str
    """The statement (no parameters) that reads `Store.write_mark`'s number."""
    row_lock: str
    """What follows a `SELECT` to lock the rows it reads until the transaction ends (" FOR
    UPDATE"), or "" when the transaction has locked the database already."""
    error: type[Exception]
    """The driver's base error (a statement failed, or the connection)."""

    @abc.abstractmethod
    def transaction(self, db: Connection) -> AbstractContextManager[object]:
        """One transaction on `db` for the statements in the `with` block: committed when the
        block ends, rolled back when it raises; on SQLite it takes the write lock first
        (`BEGIN IMMEDIATE`), so a read-then-write in it is atomic against every other
        connection."""

    @abc.abstractmethod
    def use_refresh(
        self, db: Connection, token_hash: bytes, now_ms: int
    ) -> tuple[str, bool, dict[str, Any]] | None:
        """See `BridgeStore.use_refresh`."""

    @abc.abstractmethod
    def change_state(
        self,
        db: Connection,
        kind: str,
        key: str,
        changes: dict[str, Any],
        now_ms: int,
        where: dict[str, Any] | None,
    ) -> dict[str, Any] | None:
        """See `OAuthStore.change_oauth_state`."""

    @abc.abstractmethod
    def take_state(
        self, db: Connection, kind: str, key: str, now_ms: int, where: dict[str, Any] | None
    ) -> dict[str, Any] | None:
        """See `OAuthStore.take_oauth_state`."""

    @abc.abstractmethod
    def expire_states(self, db: Connection, kind: str, now_ms: int) -> Found:
        """See `OAuthStore.expire_oauth_states` (sorted by key)."""

    @abc.abstractmethod
    def drop_states(self, db: Connection, kind: str, where: dict[str, Any]) -> int:
        """See `OAuthStore.drop_oauth_states`."""

    @abc.abstractmethod
    def sync_keys(self, db: Connection, home: str, wanted: list[bytes]) -> list[bytes]:
        """See `SealedKeyStore.sync_sealed_keys` (`store/sealed.py`)."""
