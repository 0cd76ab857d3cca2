"""What went wrong with the state folder, said as it is: a full disk, a folder that cannot be
written, and a damaged file are three different sentences, each with what to do.

SQLite says which it was in its result code (`sqlite3.Error.sqlite_errorname`: SQLITE_FULL,
SQLITE_READONLY..., SQLITE_CORRUPT, SQLITE_NOTADB); the operating system in `errno` (ENOSPC,
EDQUOT; EROFS, EACCES, EPERM). Everything else is left to its caller.
"""

from __future__ import annotations

import errno
import sqlite3
from enum import Enum
from pathlib import Path


class Trouble(Enum):
    """The kinds of state trouble an operator must tell apart."""

    FULL = "full"
    READ_ONLY = "read-only"
    DAMAGED = "damaged"


FULL_ERRNOS = {errno.ENOSPC, errno.EDQUOT}
READ_ONLY_ERRNOS = {errno.EROFS, errno.EACCES, errno.EPERM}


def trouble_of(exc: BaseException) -> Trouble | None:
    """Which kind of trouble `exc` is, or None for any other error."""
    if isinstance(exc, sqlite3.Error):
        name = getattr(exc, "sqlite_errorname", "") or ""
        text = str(exc).lower()
        if name.startswith("SQLITE_FULL") or "disk is full" in text:
            return Trouble.FULL
        if name.startswith("SQLITE_READONLY") or "readonly database" in text:
            return Trouble.READ_ONLY
        if name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB")) or "not a database" in text:
            return Trouble.DAMAGED
        if isinstance(exc, sqlite3.DatabaseError) and "malformed" in text:
            return Trouble.DAMAGED
        return None
    if isinstance(exc, OSError) and exc.errno is not None:
        if exc.errno in FULL_ERRNOS:
            return Trouble.FULL
        if exc.errno in READ_ONLY_ERRNOS:
            return Trouble.READ_ONLY
    return None


def state_sentence(exc: BaseException, state_dir: Path) -> str | None:
    """The one sentence for `exc` met on the state in `state_dir`, or None when it is none of
    the three kinds."""
    kind = trouble_of(exc)
    why = getattr(exc, "strerror", None) or str(exc)
    if kind is Trouble.FULL:
        return (
            f"the disk holding the state folder {state_dir} is full ({why}); free space there or"
            " give it a larger volume, then run this again: nothing already kept was lost"
        )
    if kind is Trouble.READ_ONLY:
        return (
            f"the state folder {state_dir} cannot be written ({why}): mount it read-write, or let"
            " the bridge's user write it, or point state_dir at a folder it may write"
        )
    if kind is Trouble.DAMAGED:
        return (
            f"the database {Path(state_dir) / 'bridge.sqlite'} is damaged ({why}); restore it"
            " from a backup (`ftwbridge db restore --from DIR`), or move it aside to start with"
            " no homes, rosters or tokens"
        )
    return None


def oauth_words(exc: BaseException) -> str | None:
    """The words an OAuth or MCP client gets for `exc` (no folder named: they are not the
    operator's), or None for any other error."""
    kind = trouble_of(exc)
    if kind is Trouble.FULL:
        return "the bridge's storage is full; try again later"
    if kind is Trouble.READ_ONLY:
        return "the bridge cannot save anything now; try again later"
    if kind is Trouble.DAMAGED:
        return "the bridge's storage is damaged; try again later"
    return None
