"""The embedded bridge's mark on its state folder: an advisory lock on `state_dir/in-use.lock`.

An embedded bridge (`ftwbridge serve` with no `database_url`) holds a shared lock
(`fcntl.flock`, `LOCK_SH`) on the file for as long as it serves; several may hold it at once,
as before. `ftwbridge db import` takes the lock exclusively (`LOCK_EX`) for the whole import,
so it refuses while any bridge serves on that folder, and a bridge started during an import
refuses in turn. The kernel drops a lock with its process however the process ends
(`kill -9` too), so a lock file left behind is never stale; the file itself stays (empty,
harmless). Both sides ask without waiting (`LOCK_NB`): nothing here blocks.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

IN_USE_FILE = "in-use.lock"
"""The lock file's name in `state_dir`."""


class StateInUse(Exception):
    """The state folder is held the other way: by a running bridge (for an import) or by an
    import (for a bridge). The message is one sentence naming the folder."""


def in_use_path(state_dir: Path) -> Path:
    """Where the lock of `state_dir` lives."""
    return Path(state_dir) / IN_USE_FILE


@contextlib.contextmanager
def _locked(state_dir: Path, mode: int, refusal: str) -> Iterator[None]:
    path = in_use_path(state_dir)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
        except BlockingIOError:
            raise StateInUse(refusal.format(folder=state_dir)) from None
        yield
    finally:
        os.close(fd)  # closing releases the lock


def serving_state(state_dir: Path) -> contextlib.AbstractContextManager[None]:
    """Hold `state_dir`'s shared lock while a bridge serves on it (the folder must exist).

    Raises:
        StateInUse: `ftwbridge db import` is reading the folder now.
        OSError: the lock file cannot be made.
    """
    return _locked(
        state_dir,
        fcntl.LOCK_SH,
        "the state folder {folder} is being imported into PostgreSQL (`ftwbridge db import`"
        " is running); start this bridge once the import has ended",
    )


def importing_state(state_dir: Path) -> contextlib.AbstractContextManager[None]:
    """Hold `state_dir`'s lock exclusively while an import reads it.

    Raises:
        StateInUse: a bridge serves on the folder now.
        OSError: the lock file cannot be made (the folder is missing or not writable).
    """
    return _locked(
        state_dir,
        fcntl.LOCK_EX,
        "a bridge is running on the state folder {folder}; stop it first (the import must"
        " read the state no running bridge is changing)",
    )
