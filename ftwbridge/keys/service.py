"""Agent keys at rest (a JSON file, mode 0600) and the handshakes that use them.

The keys part creates an agent's X25519 key, writes Noise message 1 and reads message 2 for a
session, and hands back only the transport keys and handshake hash: a static private key never
leaves it. A key is forgotten once a roster that listed its agent no longer does.
"""

from __future__ import annotations

import itertools
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import trio

from ftwbridge.proto.errors import ProtocolError
from ftwbridge.proto.noise import Initiator, TransportKeys, generate_static

MAX_PENDING_HANDSHAKES = 4096


class KeysError(Exception):
    """A keys-part request that cannot be served (unknown key or handshake, bad message 2,
    or the keys part unreachable). `unknown_key`: it holds no such agent key; `bad_message`:
    the box's message 2 failed the handshake."""

    def __init__(
        self, message: str, *, unknown_key: bool = False, bad_message: bool = False
    ) -> None:
        super().__init__(message)
        self.unknown_key = unknown_key
        self.bad_message = bad_message


class KeysPort(Protocol):
    """What the pool and OAuth need of the keys part, in-process or over its socket."""

    async def create(self, home: str) -> bytes:
        """Make a key for a new agent of `home`; returns its public key (32 bytes)."""

    async def begin(self, agent_key: bytes, box_noise_key: bytes) -> tuple[int, bytes]:
        """Start a handshake as `agent_key`; returns (handle, message 1)."""

    async def finish(self, handle: int, message2: bytes) -> TransportKeys:
        """Read message 2 of handshake `handle`; returns its transport keys."""

    async def abort(self, handle: int) -> None:
        """Drop an unfinished handshake."""

    async def sync(self, home: str, listed: frozenset[bytes]) -> list[bytes]:
        """Apply `home`'s newest roster's agent keys; returns the keys forgotten."""

    async def has(self, agent_key: bytes) -> bool:
        """Whether the keys part holds `agent_key`."""

    async def drop(self, agent_key: bytes) -> None:
        """Forget a key no roster ever listed (a consent that never completed)."""


@dataclass(slots=True)
class _Key:
    home: str
    private: bytes
    listed: bool = False


class KeysService:
    """`KeysPort` in-process; keys persist in `path` (written 0600, replaced atomically).

    Args:
        path: the key file, or None to keep keys in memory only (tests).
    """

    def __init__(self, path: Path | None) -> None:
        self._path = path
        self._keys: dict[bytes, _Key] = {}
        self._pending: dict[int, Initiator] = {}
        self._ids = itertools.count(1)
        self._forgotten: set[bytes] = set()
        self._keys.update(self._read())

    async def _save(self) -> None:
        if self._path is None:
            return
        self._merge(await trio.to_thread.run_sync(self._read))
        data = {
            pub.hex(): {"home": k.home, "private": k.private.hex(), "listed": k.listed}
            for pub, k in self._keys.items()
        }
        await trio.to_thread.run_sync(self._write, data)

    def _merge(self, found: dict[bytes, _Key]) -> None:
        """Take keys another process (`ftwbridge agent create`) added to the file; keys this
        process forgot stay forgotten."""
        for pub, key in found.items():
            if pub not in self._keys and pub not in self._forgotten:
                self._keys[pub] = key

    def _write(self, data: dict[str, dict[str, object]]) -> None:
        assert self._path is not None
        self._path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self._path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f)
        os.replace(tmp, self._path)

    @property
    def pending_handshakes(self) -> int:
        """Handshakes begun and neither finished nor aborted."""
        return len(self._pending)

    async def create(self, home: str) -> bytes:
        """See `KeysPort.create`."""
        private, public = generate_static()
        self._keys[public] = _Key(home, private)
        await self._save()
        return public

    async def begin(self, agent_key: bytes, box_noise_key: bytes) -> tuple[int, bytes]:
        """See `KeysPort.begin`.

        Raises:
            KeysError: unknown agent key, or too many unfinished handshakes.
        """
        key = self._keys.get(agent_key) or await self._reload(agent_key)
        if key is None:
            raise KeysError("the keys part holds no such agent key", unknown_key=True)
        if len(self._pending) >= MAX_PENDING_HANDSHAKES:
            raise KeysError("too many handshakes in progress")
        initiator = Initiator(our_static=key.private, their_static=box_noise_key)
        message1 = initiator.write_message1()
        handle = next(self._ids)
        self._pending[handle] = initiator
        return handle, message1

    async def finish(self, handle: int, message2: bytes) -> TransportKeys:
        """See `KeysPort.finish`.

        Raises:
            KeysError: unknown handle, or a message 2 that fails the handshake.
        """
        initiator = self._pending.pop(handle, None)
        if initiator is None:
            raise KeysError("no such handshake")
        try:
            keys, _payload = initiator.read_message2(message2)
        except ProtocolError as exc:
            raise KeysError(str(exc), bad_message=True) from exc
        return keys

    async def abort(self, handle: int) -> None:
        """See `KeysPort.abort`."""
        self._pending.pop(handle, None)

    async def sync(self, home: str, listed: frozenset[bytes]) -> list[bytes]:
        """See `KeysPort.sync`: keys listed now are marked; keys listed before and not now go."""
        gone: list[bytes] = []
        changed = False
        for pub, key in list(self._keys.items()):
            if key.home != home:
                continue
            if pub in listed:
                changed |= not key.listed
                key.listed = True
            elif key.listed:
                del self._keys[pub]
                self._forgotten.add(pub)
                gone.append(pub)
        if gone or changed:
            await self._save()
        return gone

    async def drop(self, agent_key: bytes) -> None:
        """See `KeysPort.drop`."""
        key = self._keys.get(agent_key)
        if key is not None and not key.listed:
            del self._keys[agent_key]
            self._forgotten.add(agent_key)
            await self._save()

    async def has(self, agent_key: bytes) -> bool:
        """See `KeysPort.has`."""
        return agent_key in self._keys or await self._reload(agent_key) is not None

    async def _reload(self, agent_key: bytes) -> _Key | None:
        """Look in the file for a key another process added since we read it."""
        if self._path is None:
            return None
        self._merge(await trio.to_thread.run_sync(self._read))
        return self._keys.get(agent_key)

    def _read(self) -> dict[bytes, _Key]:
        if self._path is None or not self._path.exists():
            return {}
        rows = json.loads(self._path.read_text("utf-8"))
        return {
            bytes.fromhex(pub): _Key(row["home"], bytes.fromhex(row["private"]), row["listed"])
            for pub, row in rows.items()
        }
