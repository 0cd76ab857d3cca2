"""The embedded bridge keeps an eye on its state folder: one bridge a folder, and a folder that
vanishes or is replaced while it serves stops its readiness, in words.

SQLite keeps serving the file the bridge opened even after the folder is deleted, and a later
`ftwbridge home enroll` makes a new folder and database the running bridge never reads; the
operator is then told to run the command they just ran. So the bridge remembers the folder's
and the database's identity (device and inode) at start and compares them at each `/readyz`.

A full disk under the state folder is said too (`StateWatch.disk_full`): the bridge goes on
serving what only reads, and `/readyz` says it is degraded and why (docs/operations.md, "A
full disk").

A second `ftwbridge serve` on a folder another one serves is refused at start: two processes
would each hold their own sessions, claim codes and consent requests on one database. The
first holds an advisory lock (`fcntl.flock`, exclusive, on `state_dir/serve.lock`) for as long
as it serves; the kernel drops it when the process ends, `kill -9` included.
"""

from __future__ import annotations

import contextlib
import fcntl
import math
import os
from collections.abc import Iterator
from pathlib import Path

from ftwbridge.lifecycle import StartupError

SERVE_LOCK = "serve.lock"
FULL_BELOW_BYTES = 1 << 20
"""Free space under which the state's disk counts as full (bytes): SQLite needs a few pages
and a journal for each write, and a disk this close to full fails them soon."""


@contextlib.contextmanager
def one_bridge(state_dir: Path) -> Iterator[None]:
    """Hold `state_dir`'s serve lock while this bridge serves.

    Raises:
        StartupError: another bridge serves the folder now (one sentence), or the lock file
            cannot be made.
    """
    try:
        fd = os.open(Path(state_dir) / SERVE_LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        raise StartupError(
            f"the state folder {state_dir} cannot be locked: {exc.strerror or exc}",
            setting="state_dir",
        ) from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise StartupError(
                f"another bridge is already serving the state folder {state_dir}; stop it, or"
                " give this one a state_dir of its own",
                setting="state_dir",
            ) from None
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


class StateWatch:
    """The state folder and database as they were when the bridge started serving."""

    def __init__(self, state_dir: Path) -> None:
        self.folder = Path(state_dir)
        self.database = self.folder / "bridge.sqlite"
        self._folder_id = _identity(self.folder)
        self._database_id = _identity(self.database)

    def not_ready(self) -> str | None:
        """Why the bridge must not be taken for ready because of its state folder, in one
        sentence, or None while the folder and the database are the ones it opened."""
        folder_id, database_id = _identity(self.folder), _identity(self.database)
        if folder_id is None or database_id is None:
            return (
                f"the state folder {self.folder} or its bridge.sqlite was removed while the"
                " bridge runs: it still serves the database it opened, which commands no longer"
                " reach; put the folder back (`ftwbridge db restore --from DIR`) and restart the"
                " bridge"
            )
        if folder_id != self._folder_id or database_id != self._database_id:
            return (
                f"the state folder {self.folder} or its bridge.sqlite was replaced while the"
                " bridge runs: commands now change a database this bridge does not read;"
                " restart the bridge to serve the one there now"
            )
        return None

    def free_bytes(self) -> float:
        """Bytes free to the bridge's user on the state folder's disk (`statvfs`'s
        `f_bavail`), or NaN when the folder cannot be looked at."""
        try:
            st = os.statvfs(self.folder)
        except OSError:
            return math.nan
        return float(st.f_bavail * st.f_frsize)

    def disk_full(self) -> str | None:
        """Why the state's disk is full, in one sentence with what to do, or None while it has
        `FULL_BELOW_BYTES` free (to the bridge's user: `statvfs`'s `f_bavail`) and room for a
        file (`f_favail`). A folder that cannot be looked at is `not_ready`'s to say."""
        try:
            st = os.statvfs(self.folder)
        except OSError:
            return None
        free = st.f_bavail * st.f_frsize
        no_files = st.f_files > 0 and st.f_favail == 0
        if free >= FULL_BELOW_BYTES and not no_files:
            return None
        left = "no file can be made there" if no_files else f"{free // 1024} KiB free"
        return (
            f"the disk holding the state folder {self.folder} is full ({left}): sign-ins, tokens,"
            " enrolments and homes' new rosters cannot be saved; free space there or give it a"
            " larger volume (nothing kept was lost; reads and warm sessions go on)"
        )
