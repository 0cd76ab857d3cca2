"""The operator's one-shot commands on the bridge's state (`ftwbridge home enroll`, `agent
create`, `db migrate`, `db import`, `token issue`); `ftwbridge.cli` parses their arguments and
turns their `StartupError`s into one sentence and exit status 2.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import trio

from ftwbridge.config import Config, kek_bytes, keys_addresses, mesh_key_bytes
from ftwbridge.keys import KeysClient, KeysPort, KeysService
from ftwbridge.keys.remote import ChannelRefused, RemoteKeys
from ftwbridge.keys.service import KeysError
from ftwbridge.lifecycle import StartupError
from ftwbridge.mesh.tls import client_of
from ftwbridge.proto.roster import RosterRefused, verify_roster
from ftwbridge.store import BridgeStore, StoreError, open_store, sqlite_path


async def sealed_keys_service(store: BridgeStore, kek: bytes) -> KeysPort:
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


async def enroll(config: Config, home: str, key_hex: str) -> int:
    """`ftwbridge home enroll`: record `home`'s Ed25519 public key (32 bytes, hex); says
    whether it was new, the same, or a change (a running bridge then closes the home's uplink).

    Raises:
        StartupError: the key is not 32 bytes of hex; the store cannot be started.
    """
    try:
        key = bytes.fromhex(key_hex)
    except ValueError:
        key = b""
    if len(key) != 32:
        raise StartupError("the home's key must be 32 bytes of hex (64 characters)")
    store = await started_store(config)
    try:
        before = await store.home_key(home)
        await store.enroll_home(home, key)
    finally:
        store.close()
    if before is None:
        print(f"enrolled {home}")
    elif before == key:
        print(f"{home} was already enrolled with this key; nothing changed")
    else:  # a running bridge on this state notices within `rosters.HOME_KEY_CHECK_S`
        print(
            f"re-enrolled {home} with a new key: a bridge running on this state closes the"
            " home's uplink within a second and verifies its next uplink and roster with the"
            " new key"
        )
    return 0


async def agent_create(config: Config, home: str) -> int:
    """`ftwbridge agent create`: have the keys part the configuration names (a keys service,
    a keys socket, the sealed keys under `kek`, or the local file) make a new agent key for
    `home`, and print its public key (hex).

    Raises:
        StartupError: the home is not enrolled; the keys part refuses or does not answer
            (names the setting to check).
    """
    database = sqlite_path(config.state_dir)
    if config.database_url is not None or database.is_file():
        # a key for a home the bridge does not know would serve no one
        homes = await started_store(config)
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
            tls = client_of(config.mesh_cafile)
            keys = RemoteKeys(keys_addresses(config.keys_url), mesh_key, tls=tls)
        elif config.keys_socket is not None:
            keys = KeysClient(config.keys_socket)
        elif config.kek is not None:  # the keys part's own store, as a keys service keeps it
            store = await started_store(config)
            keys = await sealed_keys_service(store, kek_bytes(config.kek))
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


async def started_store(config: Config) -> BridgeStore:
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


async def migrate(config: Config) -> int:
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


async def import_state(
    config: Config, state_dir: Path | None, keys_file: Path | None, dry_run: bool
) -> int:
    """`ftwbridge db import` (`dbimport.importer`): prints a line for each home decided other
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
    from ftwbridge.dbimport.importer import import_embedded

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


async def issue(config: Config, home: str, agent: str, wait_s: float = 0.0) -> int:
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
