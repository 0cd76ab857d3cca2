"""`ftwbridge db import` (ftwbridge/dbimport/importer.py): an embedded bridge's state carried into
PostgreSQL. The embedded state is made by the bridge's own code: its SQLite store and key
file, or a whole embedded bridge with a stub home; the PostgreSQL side is checked with the
store and the keys service's own code, and in the end by a bridge on PostgreSQL that honours a
token minted before the move and opens the agent's session through `ftwbridge keys --listen`.
Every wait is bounded (`BOUND_S`)."""

from __future__ import annotations

import json
import os
import secrets
import sqlite3
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import nacl.secret
import psycopg
import pytest
import trio
from nacl.signing import SigningKey

from devtools.rig import grant_agent, start_stub
from ftwbridge.config import Config
from ftwbridge.dbimport.importer import ImportRefused, Tally, import_embedded
from ftwbridge.keys import KeysService
from ftwbridge.keys.sealed import SealedKeysService, seal_key
from ftwbridge.lifecycle import StartupError
from ftwbridge.proto.noise import Responder, generate_static
from ftwbridge.proto.roster import AgentGrant, Device, Roster, sign_roster
from ftwbridge.run import Bridge
from ftwbridge.store import SqliteStore, TokenRecord, hash_token, sqlite_path
from ftwbridge.store.inuse import importing_state
from ftwbridge.store.postgres import PgStore
from ftwbridge.store.sealed import SqlSealedKeys, sealed_keys
from tests.store.conftest import first_line
from tests.store.test_bridge_on_postgres import _status
from tests.test_cli import _free_port, refused

BOUND_S = 90.0
"""Bound on each scenario's waits, seconds (a loaded 2-core machine)."""
KEK = bytes(range(32))
NOW_MS = 1_900_000_000_000
HOUR_MS = 3_600_000


@dataclass
class Made:
    """An embedded state made by `_embedded`: its home's signing key and agents' keys."""

    home_key: SigningKey
    listed: bytes
    """An agent the roster lists, with a token, a refresh token and a key."""
    pending: bytes
    """An agent whose key was made and that no roster lists (a sign-in never completed)."""


def _roster(home: str, key: SigningKey, seq: int, agents: list[bytes]) -> bytes:
    devices = tuple(
        Device(
            agent,
            "agent",
            False,
            agent=AgentGrant(
                id="agent-" + agent[:4].hex(),
                client="test",
                name="Test assistant",
                scopes=("ftw.live.read",),
                ops=(),
                caps={},
                granted_at_ms=NOW_MS - HOUR_MS,
                expires_at_ms=NOW_MS + 24 * HOUR_MS,
            ),
        )
        for agent in agents
    )
    return sign_roster(Roster(home, seq, NOW_MS - HOUR_MS, None, devices), key)


def _token(home: str, agent: bytes, expires_at_ms: int) -> TokenRecord:
    return TokenRecord(
        home,
        "agent-" + agent[:4].hex(),
        agent,
        ("ftw.live.read",),
        "http://b/mcp",
        "c1",
        expires_at_ms,
    )


async def _embedded(folder: Path) -> Made:
    """An embedded bridge's state in `folder`, written by its SQLite store and key file: home
    `h1` with a roster (seq 3) listing one agent, a live and an expired token, a refresh token,
    an OAuth client, and a second agent key no roster lists."""
    store = SqliteStore(sqlite_path(folder))
    keys = KeysService(folder / "agent-keys.json")
    home_key = SigningKey.generate()
    try:
        await store.enroll_home("h1", bytes(home_key.verify_key))
        listed, pending = await keys.create("h1"), await keys.create("h1")
        await store.put_roster("h1", 3, _roster("h1", home_key, 3, [listed]))
        await keys.sync("h1", frozenset({listed}))
        await store.put_token(hash_token("live"), _token("h1", listed, NOW_MS + HOUR_MS))
        await store.put_token(hash_token("old"), _token("h1", listed, NOW_MS - 1))
        record = {"home": "h1", "agentKey": listed.hex(), "client": "c1"}
        await store.put_refresh(hash_token("refresh"), "fam", record, NOW_MS + HOUR_MS)
        await store.put_client("c1", {"client_name": "Test"}, NOW_MS + HOUR_MS)
    finally:
        store.close()
    return Made(home_key, listed, pending)


async def _started(url: str) -> PgStore:
    store = PgStore(url)
    await store.start()
    return store


async def _import(folder: Path, url: str, *, dry_run: bool = False) -> Tally:
    return await import_embedded(folder, database_url=url, kek=KEK, dry_run=dry_run, now_ms=NOW_MS)


def _counts(url: str) -> dict[str, int]:
    tables = ("homes", "rosters", "tokens", "refresh_tokens", "oauth_clients", "agent_keys")
    with psycopg.connect(url) as conn:
        return {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in tables}


async def _handshake(store: PgStore, agent: bytes) -> None:
    """Open a session as `agent` through a keys service on `store`'s sealed keys."""
    service = SealedKeysService(SqlSealedKeys(store), KEK)
    box_private, box_public = generate_static()
    handle, m1 = await service.begin(agent, box_public)
    responder = Responder(our_static=box_private)
    assert responder.read_message1(m1)[0] == agent
    m2, box_keys = responder.write_message2()
    assert (await service.finish(handle, m2)).send_key == box_keys.recv_key


async def test_a_dry_run_counts_an_import_copies_once_and_a_second_run_copies_nothing(
    tmp_path: Path, pg_url: str
) -> None:
    made = await _embedded(tmp_path)
    store = await _started(pg_url)
    try:
        empty = _counts(pg_url)
        dry = await _import(tmp_path, pg_url, dry_run=True)
        assert _counts(pg_url) == empty  # nothing written
        done = await _import(tmp_path, pg_url)
        assert dry.copied == done.copied
        assert dict(done.copied) == {
            "homes": 1,
            "rosters": 1,
            "access tokens": 1,
            "refresh tokens": 1,
            "OAuth clients": 1,
            "agent keys": 1,
        }
        assert (done.expired, done.unlisted) == (1, 1)  # the old token; the pending key
        assert "imported homes 1, rosters 1, access tokens 1" in done.summary(dry_run=False)
        assert dry.summary(dry_run=True).startswith("would import homes 1")
        token = await store.token(hash_token("live"))
        assert token == _token("h1", made.listed, NOW_MS + HOUR_MS)
        assert await store.token(hash_token("old")) is None
        assert await store.home_key("h1") == bytes(made.home_key.verify_key)
        held = await store.roster("h1")
        assert held is not None and held[0] == 3
        refresh = await store.refresh_record(hash_token("refresh"), NOW_MS)
        assert refresh is not None and refresh["agentKey"] == made.listed.hex()
        assert await store.client("c1", NOW_MS) == {"client_name": "Test"}
        rows = SqlSealedKeys(store)
        sealed = await rows.sealed_key(made.listed)
        assert sealed is not None and sealed.listed and sealed.home == "h1"
        assert await rows.sealed_key(made.pending) is None
        await _handshake(store, made.listed)
        after = _counts(pg_url)
        again = await _import(tmp_path, pg_url)
        assert sum(again.copied.values()) == 0
        assert sum(again.present.values()) == 6
        assert _counts(pg_url) == after
    finally:
        store.close()


async def test_rosters_decide_conflicts_by_their_seq(tmp_path: Path, pg_url: str) -> None:
    made = await _embedded(tmp_path)
    key = bytes(made.home_key.verify_key)
    other_agent = generate_static()[1]
    store = await _started(pg_url)
    try:
        # PostgreSQL holds h1 with a newer roster (seq 5) that dropped the embedded agent
        await store.enroll_home("h1", key)
        await store.put_roster("h1", 5, _roster("h1", made.home_key, 5, [other_agent]))
        kept = await _import(tmp_path, pg_url)
        assert kept.kept_newer == ["h1"]
        held = await store.roster("h1")
        assert held is not None and held[0] == 5
        token = await store.token(hash_token("live"))
        assert token is not None and token.withdrawn  # its agent is no longer listed
        assert await SqlSealedKeys(store).sealed_key(made.listed) is None
        assert await store.refresh_record(hash_token("refresh"), NOW_MS) is None
    finally:
        store.close()


async def test_only_the_signed_seq_decides_never_the_column_beside_it(
    tmp_path: Path, pg_url: str
) -> None:
    """The `seq` columns lie (a damaged row, a hand edit, a bad restore): the embedded row says
    9 over a signed roster of seq 3, PostgreSQL's says 1 over a signed seq 5. The signed seqs
    decide: PostgreSQL's newer roster stays. Then PostgreSQL's column says 99 over a signed
    seq 2: the embedded signed 3 replaces it, and the column follows the signed seq."""
    made = await _embedded(tmp_path)
    key = bytes(made.home_key.verify_key)
    with sqlite3.connect(sqlite_path(tmp_path)) as db:
        db.execute("UPDATE rosters SET seq = 9 WHERE home = 'h1'")
    newer = _roster("h1", made.home_key, 5, [made.listed])
    store = await _started(pg_url)
    try:
        await store.enroll_home("h1", key)
        await store.put_roster("h1", 1, newer)
        kept = await _import(tmp_path, pg_url)
        assert kept.kept_newer == ["h1"] and kept.replaced == []
        assert await store.roster("h1") == (1, newer)  # untouched
        older = _roster("h1", made.home_key, 2, [made.listed])
        await store.put_roster("h1", 99, older)
        done = await _import(tmp_path, pg_url)
        assert done.replaced == ["h1"]
        held = await store.roster("h1")
        assert held is not None and held[0] == 3 and held[1] != older
    finally:
        store.close()


async def test_a_newer_embedded_roster_replaces_an_older_one_and_drops_its_agents(
    tmp_path: Path, pg_url: str
) -> None:
    made = await _embedded(tmp_path)
    key = bytes(made.home_key.verify_key)
    old_private, old_agent = generate_static()
    store = await _started(pg_url)
    try:
        # an earlier import, then the embedded bridge ran on: PostgreSQL's roster (seq 2)
        # lists an agent the embedded one (seq 3) dropped since
        await store.enroll_home("h1", key)
        await store.put_roster("h1", 2, _roster("h1", made.home_key, 2, [old_agent]))
        await store.put_token(hash_token("dropped"), _token("h1", old_agent, NOW_MS + HOUR_MS))
        await SqlSealedKeys(store).put_sealed_key(
            old_agent, "h1", seal_key(nacl.secret.SecretBox(KEK), old_private, "h1")
        )
        done = await _import(tmp_path, pg_url)
        assert done.replaced == ["h1"]
        held = await store.roster("h1")
        assert held is not None and held[0] == 3
        dropped = await store.token(hash_token("dropped"))
        assert dropped is not None and dropped.withdrawn
        assert await SqlSealedKeys(store).sealed_key(old_agent) is None
        await _handshake(store, made.listed)
        # a home enrolled there with another key is left as it is
        await store.enroll_home("h1", bytes(SigningKey.generate().verify_key))
        left = await _import(tmp_path, pg_url)
        assert left.other_key == ["h1"] and sum(left.copied.values()) == 0
    finally:
        store.close()


async def test_keys_the_embedded_keys_part_sealed_in_sqlite_move_too(
    tmp_path: Path, pg_url: str
) -> None:
    store = SqliteStore(sqlite_path(tmp_path))  # an embedded keys part that ran with kek
    try:
        home_key = SigningKey.generate()
        await store.enroll_home("h1", bytes(home_key.verify_key))
        agent = await SealedKeysService(sealed_keys(store), KEK).create("h1")
        await store.put_roster("h1", 1, _roster("h1", home_key, 1, [agent]))
    finally:
        store.close()
    pg = await _started(pg_url)
    try:
        with pytest.raises(ImportRefused, match="kek does not open the agent keys sealed in"):
            await import_embedded(tmp_path, database_url=pg_url, kek=bytes(32), now_ms=NOW_MS)
        done = await _import(tmp_path, pg_url)
        assert done.copied["agent keys"] == 1
        await _handshake(pg, agent)
    finally:
        pg.close()


async def test_a_kek_that_does_not_open_the_stored_keys_is_refused(
    tmp_path: Path, pg_url: str
) -> None:
    await _embedded(tmp_path)
    (await _started(pg_url)).close()
    await _import(tmp_path, pg_url)
    with pytest.raises(ImportRefused, match="kek does not open the agent keys"):
        await import_embedded(tmp_path, database_url=pg_url, kek=bytes(32), now_ms=NOW_MS)


async def test_a_bridge_does_not_start_on_a_state_folder_being_imported(tmp_path: Path) -> None:
    await _embedded(tmp_path)
    bridge = Bridge(
        Config(state_dir=tmp_path, bind="127.0.0.1:0", admin_bind=None, door_bind="127.0.0.1:0")
    )
    with importing_state(tmp_path), pytest.raises(StartupError, match="is being imported"):
        with trio.fail_after(BOUND_S):  # it would serve on, unbounded
            await bridge.serve()


def _env(**settings: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FTWBRIDGE_")}
    env.update({"FTWBRIDGE_" + k.upper(): v for k, v in settings.items()})
    return env


def _run(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ftwbridge", *args],
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=BOUND_S,
    )


def test_every_failure_is_one_sentence(tmp_path: Path, pg_url: str) -> None:
    trio.run(_embedded, tmp_path / "state")
    kek = KEK.hex()
    good = _env(database_url=pg_url, kek=kek, state_dir=str(tmp_path / "state"))
    refused(_run("db", "import", env=good, cwd=tmp_path), "is not migrated", "db migrate")
    assert _run("db", "migrate", env=good, cwd=tmp_path).returncode == 0
    no_db = _env(kek=kek, state_dir=str(tmp_path / "state"))
    refused(_run("db", "import", env=no_db, cwd=tmp_path), "database_url is not set")
    no_kek = _env(database_url=pg_url, state_dir=str(tmp_path / "state"))
    refused(_run("db", "import", env=no_kek, cwd=tmp_path), "kek is not set")
    missing = dict(good, FTWBRIDGE_STATE_DIR=str(tmp_path / "nowhere"))
    refused(_run("db", "import", env=missing, cwd=tmp_path), "no state folder")
    (tmp_path / "empty").mkdir()
    empty = dict(good, FTWBRIDGE_STATE_DIR=str(tmp_path / "empty"))
    refused(_run("db", "import", env=empty, cwd=tmp_path), "no bridge.sqlite")
    port = _free_port()  # nothing listens there
    down = dict(good, FTWBRIDGE_DATABASE_URL=f"postgresql://u:hunter2@127.0.0.1:{port}/x")
    sentence = refused(_run("db", "import", env=down, cwd=tmp_path), "does not answer")
    assert "hunter2" not in sentence
    keys_file = tmp_path / "state" / "agent-keys.json"
    text = keys_file.read_text()
    keys_file.write_text(text[: len(text) // 2])  # a torn file
    refused(_run("db", "import", env=good, cwd=tmp_path), "agent-keys.json", "not valid JSON")
    keys_file.write_text(text)
    done = _run("db", "import", "--dry-run", env=good, cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.startswith("would import homes 1"), done
    done = _run("db", "import", env=good, cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.startswith("imported homes 1"), done
    bad_kek = dict(good, FTWBRIDGE_KEK=secrets.token_hex(32))
    refused(_run("db", "import", env=bad_kek, cwd=tmp_path), "kek does not open", "change kek")


async def _command(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[bytes]:
    return await trio.run_process(
        [sys.executable, "-m", "ftwbridge", *args],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )


async def test_a_token_and_an_agent_key_of_an_embedded_bridge_work_on_postgres(
    tmp_path: Path, pg_url: str
) -> None:
    port, door_port = (
        _free_port(),
        _free_port(),
    )  # one public URL before and after: a token's audience
    where = {
        "bind": f"127.0.0.1:{port}",
        "public_url": f"http://127.0.0.1:{port}",
        "admin_bind": None,
        "door_bind": f"127.0.0.1:{door_port}",
    }
    door = f"ws://127.0.0.1:{door_port}/v1/box"  # the door's own listener, before and after
    stub_state = ["--state", str(tmp_path / "stub")]  # the home keeps its roster across
    mesh_key, kek = secrets.token_hex(32), secrets.token_hex(32)
    env = _env(database_url=pg_url, kek=kek, state_dir=str(tmp_path / "embedded"))
    with trio.fail_after(BOUND_S):
        # 1. the embedded bridge: a home, an approved assistant, a token
        async with trio.open_nursery() as nursery:
            embedded = Bridge(Config(state_dir=tmp_path / "embedded", **where))
            await nursery.start(embedded.serve)
            _proc, line = await start_stub(nursery, door, *stub_state, home="h1")
            await embedded.store.enroll_home("h1", bytes.fromhex(line["homeKey"]))
            await embedded.door.wait_roster("h1", lambda r: True)
            agent, agent_id = await grant_agent(embedded, line["console"], "h1")
            roster = await embedded.door.roster("h1")
            assert roster is not None
            scopes = roster.agents()[agent].scopes
            token = await embedded.issue_token("h1", agent, agent_id, scopes)
            migrated = await _command("db", "migrate", env=env)
            assert migrated.returncode == 0, migrated
            running = await _command("db", "import", env=env)  # the bridge serves on it
            assert running.returncode == 2, running
            assert b"a bridge is running on the state folder" in running.stderr, running
            await embedded.drain()  # as SIGTERM does: the rosters reach the disk
            nursery.cancel_scope.cancel()  # the stub home goes too
        # 2. the import
        imported = await _command("db", "import", env=env)
        assert imported.returncode == 0, imported
        summary = imported.stdout.decode()
        assert "access tokens 1," in summary and "agent keys 1;" in summary, summary
        # 3. a keys service and a bridge on PostgreSQL, and the home dialing it again
        async with trio.open_nursery() as nursery:
            me = [sys.executable, "-m", "ftwbridge"]
            keys_env = _env(
                database_url=pg_url, kek=kek, mesh_key=mesh_key, state_dir=str(tmp_path / "k")
            )
            line = await first_line(nursery, [*me, "keys", "--listen", "127.0.0.1:0"], keys_env)
            keys_url = line.removeprefix("keys service on ")
            on_pg = Bridge(
                Config(
                    state_dir=tmp_path / "pg",
                    database_url=pg_url,
                    keys_url=keys_url,
                    mesh_key=mesh_key,
                    **where,
                )
            )
            await nursery.start(on_pg.serve)
            await start_stub(nursery, door, *stub_state, home="h1")
            for _look in range(1200):  # no event tells a test of an uplink: look, bounded
                if on_pg.door.online("h1"):
                    break
                await trio.sleep(0.05)
            result = await _status(on_pg.site.resource, token)
            assert not getattr(result, "is_error", True), result
            assert "pv_w" in json.dumps(getattr(result, "structured_content", None))
            nursery.cancel_scope.cancel()


@pytest.mark.parametrize(
    "damage",
    [
        "UPDATE tokens SET hash = 9223372036854775807 WHERE rowid = 1",  # bytes(n): n zeros
        "UPDATE homes SET public_key = 32",  # a home key of 32 zero bytes
        "UPDATE refresh_tokens SET hash = 32",
        "UPDATE rosters SET signed = 7",
        "UPDATE oauth_clients SET metadata = printf('%.*c', 100000, '[')",  # too deep for json
    ],
)
async def test_a_damaged_row_is_refused_in_words(tmp_path: Path, pg_url: str, damage: str) -> None:
    """A damaged bridge.sqlite (SQLite keeps any type in any column): an integer in a BLOB
    column is refused as a damaged row, never read as that many zero bytes; JSON nested too
    deep for Python's parser is a damaged row too, not a traceback."""
    await _embedded(tmp_path)
    (await _started(pg_url)).close()
    db = sqlite3.connect(sqlite_path(tmp_path))
    with db:
        db.execute(damage)
    db.close()
    with pytest.raises(ImportRefused, match="cannot be read"):
        await _import(tmp_path, pg_url)
    assert _counts(pg_url)["homes"] == 0  # nothing changed


async def test_a_keys_file_nested_too_deep_is_refused_in_words(tmp_path: Path, pg_url: str) -> None:
    await _embedded(tmp_path)
    (await _started(pg_url)).close()
    (tmp_path / "agent-keys.json").write_text("[" * 100_000)
    with pytest.raises(ImportRefused, match=r"agent-keys\.json is not valid JSON"):
        await _import(tmp_path, pg_url)


async def test_a_keys_file_named_that_is_not_there_is_refused(tmp_path: Path, pg_url: str) -> None:
    """`--keys-file` names a file that does not exist (a typo, the wrong folder): refused in
    words, not read as "no agent keys", which would move every token without its agent's
    key and make each assistant sign in again. Not naming one keeps the default's rule: no
    file there, no keys from it."""
    await _embedded(tmp_path)
    (await _started(pg_url)).close()
    typo = tmp_path / "agent-key.json"
    with pytest.raises(ImportRefused, match="there is no agent keys file"):
        await import_embedded(tmp_path, database_url=pg_url, kek=KEK, keys_file=typo, now_ms=NOW_MS)
    assert _counts(pg_url)["homes"] == 0
