"""The agent-key file at rest: read whole, written whole and atomically, one writer at a time.

A write goes to a unique temporary file in the same folder (mode 0600), is flushed and fsynced,
renamed over the file, and the folder is fsynced, so a reader or a crash sees the old file or
the new one, never a mix. Writers serialize on an advisory lock (`fcntl.flock` on `<file>.lock`),
which also covers `ftwbridge agent create` run beside a live bridge: each read-merge-write runs
whole under the lock. These functions block; callers run them in `trio.to_thread`.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ftwbridge.atomic import write_atomic


class StateFileError(Exception):
    """A state file that cannot be used; the message is a sentence for the operator, naming the
    file and what to do."""


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold the exclusive advisory lock of `path` (on `path` + `.lock`, created 0600)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(f"{path}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def read_json(path: Path) -> Any:
    """The JSON value in `path`, or None when there is no such file.

    Raises:
        StateFileError: unreadable, or not JSON (the sentence says where and what to do).
    """
    try:
        text = path.read_text("utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise StateFileError(f"cannot read the agent keys file {path}: {exc}") from exc
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:  # RecursionError: nested past Python's limit
        raise StateFileError(
            f"the agent keys file {path} is not valid JSON ({exc}); restore it from a backup,"
            " or move it aside to start with no agent keys (every assistant must then be"
            " approved at home again)"
        ) from exc


def write_json_atomic(path: Path, value: Any) -> None:
    """Replace `path` with `value` as JSON, atomically (`ftwbridge.atomic`); mode 0600."""
    write_atomic(path, json.dumps(value).encode("utf-8"))


def update_json(path: Path, change: Callable[[Any], Any]) -> Any:
    """Under the file's lock: read `path` (None when absent), write `change(value)` back
    atomically, and return what was written.

    Raises:
        StateFileError: the file on disk is not usable.
    """
    with locked(path):
        value = change(read_json(path))
        write_json_atomic(path, value)
        return value
