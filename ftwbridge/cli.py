"""`ftwbridge` command line: the only reader of argv and the environment.

  ftwbridge serve [--config FILE] [--exit-with-parent]
                                                 run the bridge (SIGTERM drains, a second exits)
  ftwbridge keys --socket PATH [--config FILE]   run the keys part as its own process
  ftwbridge keys --listen HOST:PORT              ... as a keys service on TCP (mesh_key)
  ftwbridge home enroll --home H --key HEX       enroll a home's Ed25519 public key
  ftwbridge home list                            the enrolled homes and their rosters
  ftwbridge agent create --home H                have the keys part make a new agent key
  ftwbridge agent list --home H                  the agents the home's roster lists
  ftwbridge token issue --home H --agent A       mint a development token for a listed agent
                        [--wait SECONDS]         ... waiting for the owner's approval
  ftwbridge db migrate                           bring database_url's schema up to date
  ftwbridge db backup --to DIR                   copy the embedded state, while it runs
  ftwbridge db restore --from DIR                put a backup in place (the bridge stopped)
  ftwbridge db import [--state-dir DIR] [--dry-run]
                                                 copy an embedded bridge's state into it
  ftwbridge config check                         validate; print the effective settings
  ftwbridge config sample                        a bridge.toml with every setting, commented
  ftwbridge demo [--once] [--port N]             a home, the bridge and an assistant reading it
  ftwbridge --version

`--config` may stand before or after the command; without it, settings come from the
environment (`FTWBRIDGE_*`) and defaults (state in ./state).

A configuration or start-up that cannot work (the file, a key, a value, a port in use, a state
folder that cannot be written, no state for a command that only reads) ends the command with
one sentence on stderr, `ftwbridge: ...`, and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import errno
import os
import sqlite3
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

from ftwbridge import cli_serve
from ftwbridge.cli_parser import build_parser
from ftwbridge.config import (
    ENV_PREFIX,
    Config,
    ConfigError,
    load_config,
)
from ftwbridge.extras import missing_extra
from ftwbridge.keys.keyfile import StateFileError
from ftwbridge.lifecycle import StartupError
from ftwbridge.logs import configure_logging
from ftwbridge.statewords import FULL_ERRNOS, state_sentence, trouble_of
from ftwbridge.store import StoreError, sqlite_path

Job = Callable[[], Any]
"""One command's work: called inside `trio.run` (a coroutine function, or a plain one)."""

WRITES_STATE = {("serve", None), ("keys", None), ("home", "enroll"), ("agent", "create")}
"""Commands that write `state_dir` (made if missing, mode 0700); `token issue` only reads it.
(`agent create` with `keys_socket` asks the keys part and writes nothing here.)"""


def _writable_state_dir(config: Config) -> None:
    """Make `state_dir` if it is missing and prove that a file can be created in it.

    Raises:
        StartupError: it is not a folder, or it cannot be made or written.
    """
    folder = Path(config.state_dir)
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder, prefix=".write-test-"):
            pass
    except FileExistsError:
        raise StartupError(
            f"the state folder {folder} is a file, not a folder", setting="state_dir"
        ) from None
    except OSError as exc:
        if exc.errno in (errno.EROFS, *FULL_ERRNOS):  # a read-only mount or a full disk
            raise StartupError(state_sentence(exc, folder) or str(exc)) from None
        why = exc.strerror or str(exc)
        raise StartupError(
            f"the state folder {folder} cannot be written: {why}", setting="state_dir"
        ) from None


STARTUP_ERRORS = (StartupError, StateFileError, ConfigError, sqlite3.DatabaseError, StoreError)
"""Errors whose message is the one sentence an operator reads (exit status 2); SQLite's
(a damaged `bridge.sqlite`) gets the file's name and what to do added (`_sentence`); the
PostgreSQL store's (`StoreError`: it went away under a running command) names the database."""


def _startup_error(exc: BaseException) -> BaseException | None:
    """The start-up error `exc` is, or the one a group holds when nothing else failed in it
    (its other members being cancellations and interrupts), else None. A full disk or a
    folder that cannot be written (`statewords`) is one too, whatever raised it."""
    if isinstance(exc, STARTUP_ERRORS) or trouble_of(exc) is not None:
        return exc
    if isinstance(exc, BaseExceptionGroup):
        found = [e for e in exc.exceptions if _startup_error(e) is not None]
        rest = [
            e
            for e in exc.exceptions
            if e not in found and not isinstance(e, trio.Cancelled | KeyboardInterrupt)
        ]
        if found and not rest:
            return _startup_error(found[0])
    return None


def _sentence(exc: BaseException, command: str, config: Config) -> str:
    text = str(exc)
    said = state_sentence(exc, Path(config.state_dir))
    if said is not None:
        return "ftwbridge: " + said
    if isinstance(exc, sqlite3.DatabaseError):
        text = (
            f"the database {sqlite_path(config.state_dir)} cannot be used ({exc});"
            " restore it from a backup, or move it aside to start with no homes, rosters or"
            " tokens"
        )
    setting = getattr(exc, "setting", None)
    if setting in ("bind", "admin_bind") and command == "demo":
        text += '; pick another port with --port N (make demo DEMO_ARGS="--port N")'
    elif setting is not None:
        text += f"; change {setting} in the config file (or {ENV_PREFIX}{setting.upper()})"
    return "ftwbridge: " + text


def _only_interrupts(exc: BaseException) -> bool:
    if isinstance(exc, KeyboardInterrupt):
        return True
    return isinstance(exc, BaseExceptionGroup) and all(_only_interrupts(e) for e in exc.exceptions)


def _jobs(args: argparse.Namespace, config: Config) -> dict[tuple[str, str | None], Job]:
    """(command, action) -> what runs it, with the parsed `args` and the loaded `config`."""
    from ftwbridge import admin, backup, inventory, settings  # loaded here: `--help` stays quick

    jobs: dict[tuple[str, str | None], Job] = {
        ("serve", None): lambda: cli_serve.serve(config, exit_with_parent=args.exit_with_parent),
        ("keys", None): lambda: cli_serve.keys(config, args.socket, args.listen),
        ("home", "enroll"): lambda: admin.enroll(config, args.home, args.key),
        ("agent", "create"): lambda: admin.agent_create(config, args.home),
        ("home", "list"): lambda: inventory.home_list(config),
        ("agent", "list"): lambda: inventory.agent_list(config, args.home),
        ("config", "check"): lambda: settings.check(config, args.config),
        ("config", "sample"): settings.sample,
        ("db", "backup"): lambda: backup.backup(config, args.to),
        ("db", "restore"): lambda: backup.restore(config, args.source),
        ("token", "issue"): lambda: admin.issue(config, args.home, args.agent, args.wait),
        ("db", "migrate"): lambda: admin.migrate(config),
        ("db", "import"): lambda: admin.import_state(
            config, args.state_dir, args.keys_file, args.dry_run
        ),
    }
    if args.command == "demo":
        from devtools.demo import run_demo  # the developer's rig: loaded only for the demo

        port = args.port if args.port is not None else (0 if args.once else 8780)
        jobs[("demo", None)] = lambda: run_demo(once=args.once, port=port, state_dir=args.state_dir)
    return jobs


def main(argv: list[str] | None = None) -> None:
    """Entry point of the `ftwbridge` command."""
    args = build_parser(__doc__ or "").parse_args(argv)
    action = getattr(args, "action", None)
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(f"ftwbridge: {exc}", file=sys.stderr)
        sys.exit(2)
    if "log_level" in config.model_fields_set:
        level = config.log_level
    else:  # the commands that print a result keep stderr for what went wrong
        level = "info" if args.command == "serve" else "warning"
    configure_logging(level, config.log_format)
    if (missing := missing_extra(args.command)) is not None:
        print(f"ftwbridge: {missing}", file=sys.stderr)
        sys.exit(2)
    jobs = _jobs(args, config)
    job = jobs[(args.command, action)]
    try:
        if (args.command, action) in WRITES_STATE and not (
            action == "create" and (config.keys_socket or config.keys_url) is not None
        ):
            _writable_state_dir(config)
        status = trio.run(job)
    except BaseException as exc:
        error = _startup_error(exc)
        if error is not None:
            print(_sentence(error, args.command, config), file=sys.stderr)
            status = 2
        elif _only_interrupts(exc):
            status = 130
        elif isinstance(exc, BrokenPipeError):  # `ftwbridge config check | head`: not an error
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            status = 0
        else:
            raise
    sys.exit(status)
