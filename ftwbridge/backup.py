"""`ftwbridge db backup` and `ftwbridge db restore`: the embedded bridge's state, copied whole.

A backup is a folder holding `bridge.sqlite` (SQLite's online backup API: a consistent copy
taken while the bridge runs and writes), `agent-keys.json` (copied under the key file's own
lock, so no `agent create` or bridge is half-way through a write), and `backup.json`, which
names each file with its size and SHA-256. The database is copied first and the keys file
after: every agent a roster in the copy lists then has its key in the copy (a key made in
between is one no roster lists yet, harmless). A restore checks the manifest, refuses while a
bridge serves on the folder, moves what is there aside, and puts the copies in place.

PostgreSQL (`database_url`) is backed up with its own tools (docs/operations.md, "Backups").
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import trio

from ftwbridge import __version__
from ftwbridge.atomic import write_atomic
from ftwbridge.config import Config
from ftwbridge.keys.keyfile import locked
from ftwbridge.lifecycle import StartupError
from ftwbridge.statewords import Trouble, trouble_of
from ftwbridge.store import sqlite_path
from ftwbridge.store.inuse import in_use_path

KEYS_FILE = "agent-keys.json"
MANIFEST = "backup.json"
POSTGRES_WORDS = (
    "the state is in PostgreSQL (database_url): back it up with pg_dump, as docs/operations.md"
    " says under 'Backups'"
)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _copy_database(source: Path, target: Path) -> None:
    """SQLite's online backup of `source` into `target` (mode 0600), then its integrity check.

    Raises:
        StartupError: the source cannot be opened or read, or the copy is not sound.
    """
    try:
        src = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
        try:
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            os.close(fd)
            dst = sqlite3.connect(target)
            try:
                src.backup(dst)
                ok = dst.execute("PRAGMA integrity_check").fetchone()[0]
            finally:
                dst.close()
        finally:
            src.close()
    except sqlite3.Error as exc:
        if trouble_of(exc) is Trouble.FULL:  # the copy is what needs the room
            raise _full(target.parent, exc) from None
        raise StartupError(f"the database {source} cannot be backed up: {exc}") from None
    if ok != "ok":
        raise StartupError(f"the copy of {source} fails SQLite's integrity check: {ok}")


def _full(target: Path, exc: BaseException) -> StartupError:
    """The sentence for a backup into `target` that met a full disk."""
    why = getattr(exc, "strerror", None) or str(exc)
    return StartupError(
        f"the disk holding the backup folder {target} is full ({why}); back up to a folder on"
        " another disk, or free space there: the state was not touched"
    )


def _empty_target(target: Path) -> None:
    try:
        target.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise StartupError(f"the backup folder {target} cannot be made: {exc.strerror}") from None
    if any(target.iterdir()):
        raise StartupError(
            f"the backup folder {target} is not empty; name a new folder for each backup"
        )


def backup_state(state_dir: Path, target: Path, now_s: float) -> dict[str, Any]:
    """Copy `state_dir`'s database and keys file into the new or empty folder `target`;
    returns the manifest written there (blocking: run it in a thread).

    Raises:
        StartupError: no database in `state_dir`, a target folder that is not empty or cannot
            be made, a full disk under it, or a copy that fails (one sentence each).
    """
    database = sqlite_path(state_dir)
    if not database.is_file():
        raise StartupError(f"no bridge state is in {state_dir} (no bridge.sqlite there)")
    _empty_target(target)
    try:
        return _copy_all(state_dir, database, target, now_s)
    except OSError as exc:
        if trouble_of(exc) is Trouble.FULL:
            raise _full(target, exc) from None
        raise


def _copy_all(state_dir: Path, database: Path, target: Path, now_s: float) -> dict[str, Any]:
    """`backup_state`'s copies and manifest, into the empty folder `target`."""
    _copy_database(database, target / database.name)
    keys = Path(state_dir) / KEYS_FILE
    with contextlib.ExitStack() as held:
        try:
            held.enter_context(locked(keys))
        except OSError as exc:  # a read-only folder: no writer can be half-way through
            if exc.errno != errno.EROFS:
                raise
        if keys.is_file():
            write_atomic(target / KEYS_FILE, keys.read_bytes())
    files = {
        p.name: {"bytes": p.stat().st_size, "sha256": _sha256(p)}
        for p in (target / database.name, target / KEYS_FILE)
        if p.is_file()
    }
    manifest = {
        "ftwbridge": __version__,
        "takenAtMs": int(now_s * 1000),
        "stateDir": str(Path(state_dir).resolve()),
        "files": files,
    }
    write_atomic(target / MANIFEST, (json.dumps(manifest, indent=2) + "\n").encode())
    return manifest


def _checked(source: Path) -> dict[str, Any]:
    """The manifest of the backup in `source`, each file it names checked against it."""
    try:
        manifest = json.loads((source / MANIFEST).read_text("utf-8"))
        files: dict[str, Any] = manifest["files"]
    except FileNotFoundError:
        raise StartupError(f"{source} holds no backup (no {MANIFEST} there)") from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise StartupError(
            f"the backup manifest {source / MANIFEST} cannot be used: {exc}"
        ) from None
    if "bridge.sqlite" not in files or not set(files) <= {"bridge.sqlite", KEYS_FILE}:
        raise StartupError(
            f"the backup in {source} must name bridge.sqlite and at most {KEYS_FILE} (its"
            f" {MANIFEST} names {sorted(files)})"
        )
    for name, want in files.items():
        path = source / name
        if not path.is_file() or _sha256(path) != want.get("sha256"):
            raise StartupError(
                f"the backup's {path} is missing or not the file the backup made (its SHA-256"
                " differs): take the restore from another backup"
            )
    return {"files": files, **{k: v for k, v in manifest.items() if k != "files"}}


@contextlib.contextmanager
def _no_bridge(state_dir: Path) -> Iterator[None]:
    """Hold `state_dir`'s in-use lock exclusively (no bridge serves it) for the restore."""
    fd = os.open(in_use_path(state_dir), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise StartupError(
                f"a bridge is running on the state folder {state_dir}; stop it before restoring"
            ) from None
        yield
    finally:
        os.close(fd)


def restore_state(source: Path, state_dir: Path, now_s: float) -> list[str]:
    """Put the backup in `source` in place in `state_dir` (made if missing, mode 0700); what
    was there is moved aside with the suffix `.before-restore-<ms>`. Returns what it did, a
    line each (blocking: run it in a thread).

    Raises:
        StartupError: not a backup, a file that fails its SHA-256, or a bridge serving there.
    """
    manifest = _checked(source)
    state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    said = []
    with _no_bridge(state_dir):
        suffix = f".before-restore-{int(now_s * 1000)}"
        for name in ("bridge.sqlite", "bridge.sqlite-wal", "bridge.sqlite-shm", KEYS_FILE):
            here = state_dir / name
            if here.exists():
                here.rename(here.with_name(name + suffix))
                said.append(f"moved {here} aside to {here.name}{suffix}")
        for name in manifest["files"]:
            data = (source / name).read_bytes()
            write_atomic(state_dir / name, data)
            said.append(f"restored {state_dir / name} ({len(data)} bytes)")
    return said


async def backup(config: Config, target: Path) -> int:
    """`ftwbridge db backup --to DIR`: prints one line naming what was copied."""
    if config.database_url is not None:
        raise StartupError(POSTGRES_WORDS)
    manifest = await trio.to_thread.run_sync(
        backup_state, Path(config.state_dir), target, time.time()
    )
    sizes = ", ".join(f"{n} {f['bytes']} bytes" for n, f in manifest["files"].items())
    print(f"backed up {config.state_dir} to {target}: {sizes}")
    return 0


async def restore(config: Config, source: Path) -> int:
    """`ftwbridge db restore --from DIR`: prints a line per file moved aside or restored."""
    if config.database_url is not None:
        raise StartupError(
            POSTGRES_WORDS.replace("back it up with pg_dump", "restore it with pg_restore")
        )
    for line in await trio.to_thread.run_sync(
        restore_state, source, Path(config.state_dir), time.time()
    ):
        print(line)
    return 0


__all__ = ["backup", "backup_state", "restore", "restore_state"]
