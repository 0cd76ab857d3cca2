"""`ftwbridge home list` and `ftwbridge agent list`: what the bridge's state holds, read only.

A home is listed with its key's first bytes and the roster its box last signed (its `seq`, how
many agents); an agent with what its owner granted in that roster (PROTOCOL.md part B): its id,
name, scopes, operations and when the grant ends. A roster that does not verify is said so.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from ftwbridge.admin import started_store
from ftwbridge.config import Config
from ftwbridge.lifecycle import StartupError
from ftwbridge.proto.roster import AgentGrant, RosterRefused, verify_roster
from ftwbridge.store import BridgeStore, sqlite_path

HOMES_SQL = "SELECT home FROM homes ORDER BY home"


async def _open(config: Config) -> BridgeStore:
    """The store, never made anew: a state folder with no database is refused in words."""
    if config.database_url is None and not sqlite_path(config.state_dir).is_file():
        raise StartupError(
            f"no bridge state is in {config.state_dir} (no bridge.sqlite there): point --config"
            " or state_dir at the folder the bridge uses"
        )
    return await started_store(config)


async def enrolled_homes(store: BridgeStore) -> list[str]:
    """The enrolled homes' names, sorted (SQLite or PostgreSQL, the same statement)."""
    from ftwbridge.store.postgres import PgStore
    from ftwbridge.store.sqlite import SqliteStore

    rows: list[Any]
    if isinstance(store, PgStore):
        rows = await store.query(lambda db: db.execute(HOMES_SQL).fetchall())
    else:
        assert isinstance(store, SqliteStore)
        rows = await store.run(lambda db: db.execute(HOMES_SQL).fetchall())
    return [str(row[0]) for row in rows]


async def _grants(store: BridgeStore, home: str) -> tuple[int, list[AgentGrant]] | str:
    """(roster seq, its agents' grants) for `home`, or why there are none, in words."""
    held, key = await store.roster(home), await store.home_key(home)
    if key is None:
        return "not enrolled"
    if held is None:
        return "no roster yet (its box has not connected)"
    try:
        roster = verify_roster(held[1], home_key=key, home=home)
    except RosterRefused as exc:
        return f"its roster does not verify: {exc}"
    return held[0], sorted(roster.agents().values(), key=lambda g: g.id)


def until(expires_at_ms: int, now_ms: int) -> str:
    """`2027-01-01 12:00 UTC (in 30 days)`, or `... (ended)` for a time gone by."""
    when = datetime.fromtimestamp(expires_at_ms / 1000, UTC).strftime("%Y-%m-%d %H:%M UTC")
    left_s = (expires_at_ms - now_ms) / 1000
    if left_s <= 0:
        return f"{when} (ended)"
    if left_s >= 2 * 86_400:
        return f"{when} (in {left_s / 86_400:.0f} days)"
    return f"{when} (in {left_s / 3600:.1f} h)"


async def home_list(config: Config) -> int:
    """`ftwbridge home list`: one line per enrolled home; a note when there are none.

    Raises:
        StartupError: no state in `state_dir`, or the database cannot be reached.
    """
    store = await _open(config)
    try:
        homes = await enrolled_homes(store)
        for home in homes:
            key = await store.home_key(home)
            found = await _grants(store, home)
            held = (
                found
                if isinstance(found, str)
                else f"roster seq {found[0]}, {len(found[1])} agent(s)"
            )
            print(f"{home}  key {(key or b'').hex()[:16]}...  {held}")
    finally:
        store.close()
    if not homes:
        print("no homes are enrolled (ftwbridge home enroll --home H --key HEX)")
    return 0


async def agent_list(config: Config, home: str) -> int:
    """`ftwbridge agent list --home H`: each agent the home's roster lists, with its grant.

    Raises:
        StartupError: no state, an unknown home, or a home with no usable roster.
    """
    store = await _open(config)
    try:
        found = await _grants(store, home)
    finally:
        store.close()
    if isinstance(found, str):
        raise StartupError(f"home {home!r}: {found}")
    now_ms = int(time.time() * 1000)
    seq, grants = found
    print(f"# home {home}, roster seq {seq}: {len(grants)} agent(s)")
    for g in grants:
        ops = ",".join(g.ops) or "no operations"
        print(
            f"{g.id}  {g.name!r}  scopes {','.join(g.scopes)}  {ops}"
            f"  until {until(g.expires_at_ms, now_ms)}"
        )
    return 0
