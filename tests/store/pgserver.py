"""A throwaway PostgreSQL server for the tests: `initdb` and `postgres` from Debian's
`postgresql` (`make postgres` installs it) in a temporary folder, on a free port of 127.0.0.1.

CI runs as root and PostgreSQL refuses to run as root, so the programs then run as the
`postgres` user (`runuser -u postgres --`) in a folder made theirs. Durability is turned off
(`fsync`, `synchronous_commit`, `full_page_writes`): the data is thrown away at the end.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from devtools.rig import free_port as _free_port

START_S = 60.0
"""Bound on `initdb` and on the server's start (`pg_ctl -w`), seconds (a loaded CI machine)."""


def postgres_bin() -> Path | None:
    """The folder of PostgreSQL's server programs (`initdb`, `pg_ctl`), or None when the
    server is not installed: PATH first, then Debian's `/usr/lib/postgresql/<version>/bin`."""
    found = shutil.which("pg_ctl")
    if found and shutil.which("initdb"):
        return Path(found).resolve().parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), reverse=True)
    return Path(versions[0]).parent if versions else None


@dataclass
class PgServer:
    """A running server: `url` of its `postgres` database, `port`, and how to make and drop
    databases of its own for one test each."""

    port: int
    folder: Path

    @property
    def url(self) -> str:
        """The URL of the server's `postgres` database."""
        return self.url_of("postgres")

    def url_of(self, dbname: str) -> str:
        """The URL of database `dbname` on this server."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/{dbname}"

    def create_database(self) -> str:
        """A new empty database (from `template0`); returns its URL."""
        import psycopg

        name = "t_" + uuid.uuid4().hex[:12]
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name} TEMPLATE template0")
        return self.url_of(name)


def _as_postgres(argv: list[str]) -> list[str]:
    """`argv` run as the `postgres` user when this process is root (PostgreSQL refuses root)."""
    return ["runuser", "-u", "postgres", "--", *argv] if os.geteuid() == 0 else argv


@contextlib.contextmanager
def running_postgres(bindir: Path) -> Iterator[PgServer]:
    """Start a server (initdb, then `pg_ctl start -w`), yield it, stop it (`-m immediate`)
    and remove its folder.

    Raises:
        RuntimeError: initdb or the start failed (the message holds their output).
    """
    folder = Path(tempfile.mkdtemp(prefix="ftwbridge-pg-"))
    data = folder / "data"
    if os.geteuid() == 0:
        shutil.chown(folder, "postgres", "postgres")
    port = _free_port()
    started = False
    try:
        init = subprocess.run(
            _as_postgres(
                [
                    *(str(bindir / "initdb"), "-D", str(data), "-U", "postgres"),
                    *("--auth=trust", "--no-sync", "--encoding=UTF8", "--locale=C"),
                ]
            ),
            capture_output=True,
            text=True,
            timeout=START_S,
        )
        if init.returncode != 0:
            raise RuntimeError(f"initdb failed: {init.stdout}{init.stderr}")
        options = (
            f"-p {port} -k {folder} -c listen_addresses=127.0.0.1 -c fsync=off"
            " -c synchronous_commit=off -c full_page_writes=off -c max_connections=200"
        )
        start = subprocess.run(
            _as_postgres(
                [
                    *(str(bindir / "pg_ctl"), "-D", str(data), "-l", str(folder / "log")),
                    *("-o", options, "-w", "-t", str(int(START_S)), "start"),
                ]
            ),
            capture_output=True,
            text=True,
            timeout=START_S + 10,
        )
        started = start.returncode == 0
        if not started:
            log = (folder / "log").read_text() if (folder / "log").exists() else ""
            raise RuntimeError(f"postgres did not start: {start.stdout}{start.stderr}{log}")
        yield PgServer(port, folder)
    finally:
        if started:
            subprocess.run(
                _as_postgres([str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"]),
                capture_output=True,
                timeout=START_S,
            )
        shutil.rmtree(folder, ignore_errors=True)
