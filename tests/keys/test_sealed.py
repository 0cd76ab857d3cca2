"""Agents' private keys sealed in the store (store/sealed.py, keys/sealed.py), each test once
on SQLite and once on PostgreSQL: the rows, what a roster does to them, two keys services on
one database, and a KEK that does not open them."""

from __future__ import annotations

import nacl.secret
import pytest

from ftwbridge.keys.sealed import KekError, SealedKeysService
from ftwbridge.keys.service import KeysError, UnknownAgentKey
from ftwbridge.proto.noise import Responder, generate_static
from ftwbridge.store import BridgeStore
from ftwbridge.store.sealed import SealedKey, sealed_keys
from tests.store.conftest import OpenSame

KEK = bytes(range(32))


async def test_sealed_key_rows(store: BridgeStore) -> None:
    rows = sealed_keys(store)
    assert await rows.any_sealed_key() is None
    a, b, c, other = b"a" * 32, b"b" * 32, b"c" * 32, b"o" * 32
    for key in (a, b, c):
        await rows.put_sealed_key(key, "h1", b"sealed " + key[:1])
    await rows.put_sealed_key(other, "h2", b"sealed o")
    assert await rows.sealed_key(a) == SealedKey(a, "h1", b"sealed a", False)
    assert await rows.sealed_key(b"z" * 32) is None
    assert await rows.any_sealed_key() is not None
    assert await rows.sync_sealed_keys("h1", [a, b]) == []  # listed now; c waits (consent)
    assert (await rows.sealed_key(a) or SealedKey(a, "", b"", False)).listed
    assert sorted(await rows.sync_sealed_keys("h1", [b])) == [a]  # listed before, not now
    assert await rows.sealed_key(a) is None
    assert await rows.sync_sealed_keys("h1", [b]) == []  # applied twice: nothing more goes
    assert not await rows.drop_sealed_key(b)  # listed: a roster decides when it goes
    assert await rows.drop_sealed_key(c)  # never listed: a consent that did not complete
    assert not await rows.drop_sealed_key(c)
    assert await rows.sealed_key(other) is not None  # another home's keys are untouched


async def test_a_keys_service_on_sealed_keys(store: BridgeStore) -> None:
    service = SealedKeysService(sealed_keys(store), KEK)
    key = await service.create("h1")
    row = await sealed_keys(store).sealed_key(key)
    assert row is not None and row.home == "h1" and len(row.sealed) == 40 + 32 + 2
    assert nacl.secret.SecretBox(KEK).decrypt(row.sealed)[32:] == b"h1"
    assert key not in row.sealed  # the public key is not what is sealed; the private is
    assert await service.has(key)
    box_private, box_public = generate_static()
    handle, m1 = await service.begin(key, box_public)
    responder = Responder(our_static=box_private)
    assert responder.read_message1(m1)[0] == key
    m2, box_keys = responder.write_message2()
    assert (await service.finish(handle, m2)).send_key == box_keys.recv_key
    assert await service.sync("h1", frozenset({key})) == []
    assert await service.sync("h1", frozenset()) == [key]
    with pytest.raises(UnknownAgentKey):
        await service.begin(key, box_public)
    await service.check_kek()  # nothing stored: nothing to refuse


async def test_two_keys_services_on_one_database_serve_the_same_agent(
    open_same: OpenSame,
) -> None:
    one, two = open_same(), open_same()
    await one.start()
    await two.start()
    first = SealedKeysService(sealed_keys(one), KEK)
    second = SealedKeysService(sealed_keys(two), KEK)
    key = await first.create("h1")
    box_private, box_public = generate_static()
    handle, m1 = await second.begin(key, box_public)  # made by one, opened by the other
    responder = Responder(our_static=box_private)
    assert responder.read_message1(m1)[0] == key
    m2, _ = responder.write_message2()
    assert (await second.finish(handle, m2)).handshake_hash
    assert await second.sync("h1", frozenset({key})) == []
    assert await first.sync("h1", frozenset()) == [key]  # forgotten by one: gone for both
    assert not await second.has(key)


async def test_a_kek_that_does_not_open_the_stored_keys_is_said_at_start(
    store: BridgeStore,
) -> None:
    key = await SealedKeysService(sealed_keys(store), KEK).create("h1")
    other = SealedKeysService(sealed_keys(store), bytes(32))
    with pytest.raises(KekError, match="kek does not open the agent keys the database holds"):
        await other.check_kek()
    with pytest.raises(KeysError, match="does not open under this kek"):
        await other.begin(key, generate_static()[1])


async def test_a_sealed_key_moved_to_another_row_does_not_serve(store: BridgeStore) -> None:
    rows = sealed_keys(store)
    service = SealedKeysService(rows, KEK)
    key = await service.create("h1")
    row = await rows.sealed_key(key)
    assert row is not None
    await rows.put_sealed_key(b"m" * 32, "h1", row.sealed)  # another agent's row, same bytes
    with pytest.raises(KeysError, match="does not belong to its row"):
        await service.begin(b"m" * 32, generate_static()[1])
