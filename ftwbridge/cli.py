"""`ftwbridge` command line: the only reader of argv and the environment.

  ftwbridge serve [--config FILE] [--exit-with-parent]
                                                 run the bridge (SIGTERM drains, a second exits)
  ftwbridge keys --socket PATH [--config FILE]   run the keys part as its own process
  ftwbridge keys --listen HOST:PORT              ... as a keys service on TCP (mesh_key)
  ftwbridge home enroll --home H --key HEX       enroll a home's Ed25519 public key
  ftwbridge agent create --home H                have the keys part make a new agent key
  ftwbridge token issue --home H --agent A       mint a development token for a listed agent
                        [--wait SECONDS]         ... waiting for the owner's approval
  ftwbridge db migrate                           bring database_url's schema up to date
  ftwbridge db import [--state-dir DIR] [--dry-run]
                                                 copy an embedded bridge's state into it
  ftwbridge demo [--once] [--port N]             a home, the bridge and an assistant reading it

`--config` may stand before or after the command; without it, settings come from the
environment (`FTWBRIDGE_*`) and defaults (state in ./state).

A configuration or start-up that cannot work (the file, a key, a value, a port in use, a state
folder that cannot be written, no state for a command that only reads) ends the command with
one sentence on stderr, `ftwbridge: ...`, and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

from ftwbridge.config import (
    ENV_PREFIX,
    Config,
    ConfigError,
    kek_bytes,
    keys_addresses,
    load_config,
    mesh_key_bytes,
    split_address,
)
from ftwbridge.keys import KeysClient, KeysPort, KeysService, serve_keys
from ftwbridge.keys.keyfile import StateFileError
from ftwbridge.keys.remote import ChannelRefused, RemoteKeys, url_of
from ftwbridge.keys.service import KeysError
from ftwbridge.lifecycle import StartupError, until_signalled, until_stdin_closes
from ftwbridge.logs import configure_logging
from ftwbridge.proto.roster import RosterRefused, verify_roster
from ftwbridge.store import BridgeStore, StoreError, open_store, sqlite_path


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
    p = argparse.ArgumentParser(
        prog="ftwbridge", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--config", type=Path, default=None, help="TOML config file")
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
    agent = sub.add_parser("agent", help="agents").add_subparsers(dest="action", required=True)
    create = agent.add_parser(
        "create", help="make a new agent key (prints it, hex)", parents=[common]
    )
    create.add_argument("--home", required=True)
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
    db = sub.add_parser("db", help="the PostgreSQL store").add_subparsers(
        dest="action", required=True
    )
    db.add_parser(
        "migrate", help="apply the schema migrations database_url lacks", parents=[common]
    )
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
            store = await _started_store(config)
            service = await _sealed_keys(store, kek_bytes(config.kek))
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
                    host, port = await nursery.start(serve_keys_tcp, listen, service, mesh_key)
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


async def _sealed_keys(store: BridgeStore, kek: bytes) -> KeysPort:
    """The keys part on `store`'s sealed keys, its `kek` checked against a stored key.

    Raises:
        StartupError: `kek` does not open the keys already stored (names `kek`).
    """
    from ftwbridge.keys.sealed import KekError, SealedKeysService
    from ftwbridge.store.sealed import sealed_keys

    service = SealedKeysService(sealed_keys(store), kek)
    try:
        await service.check_kek()
    except KekError as exc:
        raise StartupError(str(exc), setting="kek") from None
    return service


async def _enroll(config: Config, home: str, key_hex: str) -> int:
    try:
        key = bytes.fromhex(key_hex)
    except ValueError:
        key = b""
    if len(key) != 32:
        raise StartupError("the home's key must be 32 bytes of hex (64 characters)")
    store = await _started_store(config)
    try:
        before = await store.home_key(home)
        await store.enroll_home(home, key)
    finally:
        store.close()
    if before is None:
        print(f"enrolled {home}")
    elif before == key:
        print(f"{home} was already enrolled with this key; nothing changed")
    else:  # a running bridge on this state notices within `door.HOME_KEY_CHECK_S`
        print(
            f"re-enrolled {home} with a new key: a bridge running on this state closes the"
            " home's uplink within a second and verifies its next uplink and roster with the"
            " new key"
        )
    return 0


async def _agent_create(config: Config, home: str) -> int:
    database = sqlite_path(config.state_dir)
    if config.database_url is not None or database.is_file():
        # a key for a home the bridge does not know would serve no one
        homes = await _started_store(config)
        try:
            enrolled = await homes.home_key(home) is not None
        finally:
            homes.close()
        if not enrolled:
            raise StartupError(
                f"home {home!r} is not enrolled here: run `ftwbridge home enroll --home {home}"
                " --key <its key>` first"
            )
    store: BridgeStore | None = None
    keys: KeysPort | None = None
    try:
        if config.keys_url is not None and config.mesh_key is not None:
            mesh_key = mesh_key_bytes(config.mesh_key)
            keys = RemoteKeys(keys_addresses(config.keys_url), mesh_key)
        elif config.keys_socket is not None:
            keys = KeysClient(config.keys_socket)
        elif config.kek is not None:  # the keys part's own store, as a keys service keeps it
            store = await _started_store(config)
            keys = await _sealed_keys(store, kek_bytes(config.kek))
        else:
            keys = KeysService(Path(config.state_dir) / "agent-keys.json")
        print((await keys.create(home)).hex())
    except ChannelRefused as exc:  # another mesh key
        raise StartupError(str(exc), setting="mesh_key") from None
    except KeysError as exc:  # the keys part answers nobody
        if config.keys_url is not None:
            raise StartupError(str(exc), setting="keys_url") from None
        raise StartupError(f"{exc} at {config.keys_socket}", setting="keys_socket") from None
    finally:
        if isinstance(keys, RemoteKeys):
            await keys.aclose()
        if store is not None:
            store.close()
    return 0


async def _started_store(config: Config) -> BridgeStore:
    """The configuration's store, started (PostgreSQL: connected and migrated).

    Raises:
        StartupError: the database cannot be reached or migrated (names `database_url`).
    """
    store = open_store(config.database_url, config.state_dir)
    try:
        await store.start()
    except StoreError as exc:
        store.close()
        raise StartupError(str(exc), setting="database_url") from None
    return store


async def _migrate(config: Config) -> int:
    """`ftwbridge db migrate`: apply the migrations `database_url` lacks (`store.migrate`);
    prints one line per file applied, or that there was none to apply."""
    if config.database_url is None:
        raise StartupError(
            "db migrate works on PostgreSQL and database_url is not set (the SQLite store in"
            " state_dir makes its own schema)",
            setting="database_url",
        )
    from ftwbridge.store.postgres import PgStore

    store = PgStore(config.database_url)
    try:
        applied = await store.start()
    except StoreError as exc:
        raise StartupError(str(exc), setting="database_url") from None
    finally:
        store.close()
    for name in applied:
        print(f"applied {name}")
    if not applied:
        print(f"{store.where} is up to date; nothing to apply")
    return 0


async def _import(
    config: Config, state_dir: Path | None, keys_file: Path | None, dry_run: bool
) -> int:
    """`ftwbridge db import` (`store.importer`): prints a line for each home decided other
    than by a plain copy, then one summary line of counts."""
    if config.database_url is None:
        raise StartupError(
            "db import copies an embedded bridge's state into PostgreSQL and database_url is"
            " not set",
            setting="database_url",
        )
    if config.kek is None:
        raise StartupError(
            "db import seals agents' keys under kek, as the keys services keep them, and kek"
            " is not set (use the keys services' kek)",
            setting="kek",
        )
    from ftwbridge.store.importer import import_embedded

    tally = await import_embedded(
        Path(config.state_dir) if state_dir is None else state_dir,
        database_url=config.database_url,
        kek=kek_bytes(config.kek),
        keys_file=keys_file,
        dry_run=dry_run,
    )
    for line in tally.notes():
        print(line)
    print(tally.summary(dry_run=dry_run))
    return 0


async def _issue(config: Config, home: str, agent: str, wait_s: float = 0.0) -> int:
    """`ftwbridge token issue`: mint a token for `agent` of the roster `home`'s box signed.
    With `wait_s` > 0, a roster not yet held or not yet listing the agent is waited for, up to
    `wait_s` seconds: on PostgreSQL woken by the roster's event (`store.events`), on SQLite by
    reading the bridge's store again every `ISSUE_POLL_S` (another process writes it).

    Raises:
        StartupError: no state, no roster, a roster that does not verify, or no such agent
            (after the wait).
    """
    database = sqlite_path(config.state_dir)
    if config.database_url is None and not database.is_file():
        # never leave an empty database behind a mistyped state_dir
        raise StartupError(
            f"no bridge state is in {config.state_dir} (no bridge.sqlite there): enroll a home"
            " and run the bridge with this state folder first, or point --config or state_dir"
            " at the folder the bridge uses"
        )
    from ftwbridge.run import Bridge

    bridge = Bridge(config)
    store = bridge.store
    try:
        try:
            await store.start()
        except StoreError as exc:
            raise StartupError(str(exc), setting="database_url") from None
        deadline = trio.current_time() + max(wait_s, 0.0)
        async with trio.open_nursery() as nursery:
            changed = _RosterChanges(home)
            if wait_s > 0 and config.database_url is not None:
                from ftwbridge.store.events import Events
                from ftwbridge.store.postgres import PgStore

                assert isinstance(store, PgStore)
                await nursery.start(Events(store).serve, changed.hear, changed.gap)
            said = False
            while True:
                found = await _listed(store, home, agent)
                if isinstance(found, tuple) or trio.current_time() >= deadline:
                    break
                if not said:
                    print(
                        f"waiting up to {wait_s:g} s for the owner to approve agent {agent!r}"
                        f" of home {home!r} ({found})",
                        file=sys.stderr,
                        flush=True,
                    )
                    said = True
                poll_s = ISSUE_POLL_S if config.database_url is None else ISSUE_BACKSTOP_S
                await changed.wait(min(deadline, trio.current_time() + poll_s))
            nursery.cancel_scope.cancel()
        if isinstance(found, StartupError):
            raise found
        agent_key, grant = found
        print(await bridge.issue_token(home, agent_key, agent, grant.scopes))
        return 0
    finally:
        store.close()


ISSUE_POLL_S = 0.25
"""How often `token issue --wait` reads an SQLite store again, seconds."""
ISSUE_BACKSTOP_S = 5.0
"""On PostgreSQL `token issue --wait` is woken by the roster's event; it also reads again
this often, seconds, in case the event was lost with its connection."""


class _RosterChanges:
    """Wakes `token issue --wait` when `home`'s roster changes (PostgreSQL events)."""

    def __init__(self, home: str) -> None:
        self._home = home
        self._event = trio.Event()

    async def hear(self, event: Any) -> None:
        if event.kind == "roster" and event.home == self._home:
            self._event.set()

    async def gap(self) -> None:
        self._event.set()  # events were lost: read again

    async def wait(self, until: float) -> None:
        with trio.move_on_at(until):
            await self._event.wait()
        self._event = trio.Event()


async def _listed(store: Any, home: str, agent: str) -> tuple[bytes, Any] | StartupError:
    """`agent`'s key and grant in `home`'s roster as the store holds it, or the refusal to give
    if there is none now."""
    held, key = await store.roster(home), await store.home_key(home)
    if held is None or key is None:
        return StartupError(
            f"no roster is held for home {home!r}: enroll it and let its box connect first"
        )
    try:
        roster = verify_roster(held[1], home_key=key, home=home)
    except RosterRefused as exc:
        return StartupError(f"the roster held for home {home!r} does not verify: {exc}")
    for agent_key, grant in roster.agents().items():
        if grant.id == agent:
            return agent_key, grant
    return StartupError(
        f"the roster of home {home!r} lists no agent {agent!r}: its owner approves it at home"
    )


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
    (its other members being cancellations and interrupts), else None."""
    if isinstance(exc, STARTUP_ERRORS):
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
    jobs: dict[tuple[str, str | None], Callable[[], Any]] = {
        ("serve", None): lambda: _serve(config, exit_with_parent=args.exit_with_parent),
        ("keys", None): lambda: _keys(config, args.socket, args.listen),
        ("home", "enroll"): lambda: _enroll(config, args.home, args.key),
        ("agent", "create"): lambda: _agent_create(config, args.home),
        ("token", "issue"): lambda: _issue(config, args.home, args.agent, args.wait),
        ("db", "migrate"): lambda: _migrate(config),
        ("db", "import"): lambda: _import(config, args.state_dir, args.keys_file, args.dry_run),
    }
    if args.command == "demo":
        from ftwbridge.demo import run_demo

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
        else:
            raise
    sys.exit(status)
