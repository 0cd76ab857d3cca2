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
import functools
import os
import sqlite3
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

from ftwbridge import __version__
from ftwbridge.cli_help import EXAMPLES, config_epilog
from ftwbridge.config import (
    ENV_PREFIX,
    Config,
    ConfigError,
    kek_bytes,
    load_config,
    mesh_key_bytes,
    split_address,
)
from ftwbridge.extras import missing_extra
from ftwbridge.keys import KeysPort, KeysService, serve_keys
from ftwbridge.keys.keyfile import StateFileError
from ftwbridge.keys.remote import url_of
from ftwbridge.lifecycle import StartupError, until_signalled, until_stdin_closes
from ftwbridge.logs import configure_logging
from ftwbridge.statewords import FULL_ERRNOS, state_sentence, trouble_of
from ftwbridge.store import BridgeStore, StoreError, sqlite_path


def _wait_seconds(text: str) -> float:
    """`--wait`: a number of seconds, 0 or more (argparse says so in words otherwise)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 <= value < 366 * 86_400:
        raise argparse.ArgumentTypeError("give 0 or more seconds, at most a year")
    return value


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", type=Path, default=argparse.SUPPRESS, help="TOML config file")
    raw = argparse.RawDescriptionHelpFormatter
    p = argparse.ArgumentParser(
        prog="ftwbridge", description=__doc__, epilog=EXAMPLES, formatter_class=raw
    )
    p.add_argument("--config", type=Path, default=None, help="TOML config file")
    p.add_argument("--version", action="version", version=f"ftwbridge {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the bridge", parents=[common])
    serve.add_argument(
        "--exit-with-parent",
        action="store_true",
        help="drain and exit when standard input closes (a parent passes a pipe it never writes)",
    )
    keys = sub.add_parser(
        "keys", help="run the keys part on a Unix socket or on TCP", parents=[common]
    )
    where = keys.add_mutually_exclusive_group(required=True)
    where.add_argument("--socket", type=Path, help="serve on this Unix socket (mode 0600)")
    where.add_argument(
        "--listen", metavar="HOST:PORT", help="serve bridge instances on TCP (needs mesh_key)"
    )
    home = sub.add_parser("home", help="homes").add_subparsers(dest="action", required=True)
    enroll = home.add_parser("enroll", help="enroll a home's Ed25519 public key", parents=[common])
    enroll.add_argument("--home", required=True)
    enroll.add_argument("--key", required=True, help="32-byte public key, hex")
    home.add_parser("list", help="the enrolled homes and their rosters", parents=[common])
    agent = sub.add_parser("agent", help="agents").add_subparsers(dest="action", required=True)
    create = agent.add_parser(
        "create", help="make a new agent key (prints it, hex)", parents=[common]
    )
    create.add_argument("--home", required=True)
    agents = agent.add_parser("list", help="the agents a home's roster lists", parents=[common])
    agents.add_argument("--home", required=True)
    config = sub.add_parser(
        "config", help="the configuration", epilog=config_epilog(), formatter_class=raw
    ).add_subparsers(dest="action", required=True)
    config.add_parser(
        "check",
        help="validate it and print the settings in effect (secrets masked)",
        parents=[common],
    )
    config.add_parser("sample", help="print a bridge.toml with every setting, commented")
    token = sub.add_parser("token", help="tokens").add_subparsers(dest="action", required=True)
    issue = token.add_parser(
        "issue", help="mint a token for an agent the roster lists", parents=[common]
    )
    issue.add_argument("--home", required=True)
    issue.add_argument("--agent", required=True, help="the agent's id in the home's roster")
    issue.add_argument(
        "--wait",
        type=_wait_seconds,
        default=0.0,
        metavar="SECONDS",
        help="wait up to SECONDS for the owner to approve the agent at home (its roster to"
        " reach the bridge) instead of refusing at once",
    )
    db = sub.add_parser("db", help="the store: migrate, import, back up, restore").add_subparsers(
        dest="action", required=True
    )
    db.add_parser(
        "migrate", help="apply the schema migrations database_url lacks", parents=[common]
    )
    backup = db.add_parser(
        "backup", help="copy the embedded state (online) into a new folder", parents=[common]
    )
    backup.add_argument("--to", type=Path, required=True, metavar="DIR", help="a new, empty folder")
    restore = db.add_parser(
        "restore", help="put a backup in place (the bridge stopped)", parents=[common]
    )
    restore.add_argument("--from", dest="source", type=Path, required=True, metavar="DIR")
    imp = db.add_parser(
        "import",
        help="copy a stopped embedded bridge's state into database_url (keys sealed under kek)",
        description=(
            "Copy the homes, rosters, access and refresh token hashes, OAuth clients and"
            " agents' keys of an embedded bridge (SQLite and agent-keys.json in its state"
            " folder) into the migrated PostgreSQL of database_url, sealing the keys under kek"
            " as keys services keep them. Run it with the keys service's configuration, the"
            " embedded bridge stopped. A second run copies nothing new; a roster already newer"
            " on PostgreSQL is kept. docs/operations.md, 'Moving from one process'."
        ),
        parents=[common],
    )
    imp.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        help="the embedded bridge's state folder (default: state_dir of the configuration)",
    )
    imp.add_argument(
        "--keys-file",
        type=Path,
        default=None,
        help="its agent keys file (default: agent-keys.json in that folder)",
    )
    imp.add_argument(
        "--dry-run", action="store_true", help="count what would be copied; change nothing"
    )
    demo = sub.add_parser(
        "demo", help="a home, the bridge and an assistant reading it", parents=[common]
    )
    demo.add_argument("--once", action="store_true", help="stop after the scripted session")
    demo.add_argument(
        "--port", type=int, default=None, help="HTTP port (default 8780, 0 with --once)"
    )
    demo.add_argument(
        "--state-dir", type=Path, default=None, help="keep state here (default: a temporary folder)"
    )
    return p


async def _serve(config: Config, *, exit_with_parent: bool = False) -> int:
    """`ftwbridge serve`. With `exit_with_parent`, standard input reaching end-of-file drains
    and stops the bridge as SIGTERM does, so a parent that dies (SIGKILL included) takes it
    along (docs/operations.md, "Child processes")."""
    from ftwbridge.run import Bridge  # the HTTP stack loads only for commands that serve

    bridge = Bridge(config)

    async def run(nursery: trio.Nursery) -> None:
        await nursery.start(bridge.serve)
        print(f"ftwbridge serving {bridge.site.resource}", flush=True)
        if bridge.admin_url is not None:
            print(f"admin on {bridge.admin_url}", flush=True)
        if not exit_with_parent:
            await trio.sleep_forever()
        await until_stdin_closes()
        await bridge.drain()

    return await until_signalled(run, drain=bridge.drain)


async def _keys(config: Config, socket: Path | None, listen: str | None) -> int:
    """`ftwbridge keys`: serve the keys part on the Unix `socket`, or on TCP at `listen` to
    bridge instances that prove `mesh_key`, until signalled. With `kek` the agents' keys are
    kept sealed in the store (PostgreSQL with `database_url`, else SQLite in `state_dir`),
    else in the key file in `state_dir`. A socket another keys part serves, or an address
    that cannot be bound, is refused in one sentence with status 2."""
    from ftwbridge.keys.listen import KeysListenError, serve_keys_tcp
    from ftwbridge.keys.wire import KeysSocketError
    from ftwbridge.mesh.tls import server_of

    mesh_key = mesh_key_bytes(config.mesh_key) if config.mesh_key is not None else None
    if listen is not None:
        if mesh_key is None:
            raise StartupError(
                "keys --listen serves bridge instances over TCP, which prove the cluster's"
                " mesh_key, and mesh_key is not set",
                setting="mesh_key",
            )
        try:
            split_address(listen)
        except ValueError as exc:
            raise StartupError(f"--listen {exc}") from None
    store: BridgeStore | None = None
    try:
        service: KeysPort
        if config.kek is not None:
            from ftwbridge import admin  # the one-shot commands' module: loaded when used

            store = await admin.started_store(config)
            service = await admin.sealed_keys_service(store, kek_bytes(config.kek))
        elif config.database_url is not None:
            raise StartupError(
                "a keys service on database_url keeps agents' keys in the database, sealed"
                " under kek, and kek is not set (`openssl rand -hex 32` makes one; give every"
                " keys service the same)",
                setting="kek",
            )
        else:
            service = KeysService(Path(config.state_dir) / "agent-keys.json")
        refused: list[Exception] = []

        async def run(nursery: trio.Nursery) -> None:
            try:
                if listen is not None and mesh_key is not None:
                    tls = server_of(config.internal_certfile, config.internal_keyfile)
                    host, port = await nursery.start(
                        functools.partial(serve_keys_tcp, tls=tls), listen, service, mesh_key
                    )
                    print(f"keys service on {url_of((host, port))}", flush=True)
                elif socket is not None:
                    await nursery.start(serve_keys, socket, service)
                    print(f"keys part on {socket}", flush=True)
            except (KeysSocketError, KeysListenError) as exc:  # raised before it serves
                refused.append(exc)
                return
            await trio.sleep_forever()

        status = await until_signalled(run)
    finally:
        if store is not None:
            store.close()
    if refused:
        print(f"ftwbridge: {refused[0]}", file=sys.stderr)
        return 2
    return status


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


def main(argv: list[str] | None = None) -> None:
    """Entry point of the `ftwbridge` command."""
    args = _parser().parse_args(argv)
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
    from ftwbridge import admin, backup, inventory, settings  # loaded here: `--help` stays quick

    jobs: dict[tuple[str, str | None], Callable[[], Any]] = {
        ("serve", None): lambda: _serve(config, exit_with_parent=args.exit_with_parent),
        ("keys", None): lambda: _keys(config, args.socket, args.listen),
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
    if (missing := missing_extra(args.command)) is not None:
        print(f"ftwbridge: {missing}", file=sys.stderr)
        sys.exit(2)
    if args.command == "demo":
        from devtools.demo import run_demo

        port = args.port if args.port is not None else (0 if args.once else 8780)
        jobs[("demo", None)] = lambda: run_demo(once=args.once, port=port, state_dir=args.state_dir)
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
