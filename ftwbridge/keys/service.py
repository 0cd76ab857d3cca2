"""Agent keys at rest (a JSON file, mode 0600) and the handshakes that use them.

The keys part creates an agent's X25519 key, writes Noise message 1 and reads message 2 for a
session, and hands back only the transport keys and handshake hash: a static private key never
leaves it. A key is forgotten once a roster that listed its agent no longer does.
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol

import trio

from ftwbridge.fairshare import FairShare
from ftwbridge.proto.errors import ProtocolError
from ftwbridge.proto.noise import Initiator, StaticKey, TransportKeys, generate_static

from .keyfile import StateFileError, read_json, update_json

log = logging.getLogger("ftwbridge.keys")
MAX_PENDING_HANDSHAKES = 4096
PENDING_PER_HOME = 256
"""Unfinished handshakes of one home's agents at most: a home whose box never answers (or an
owner with many agents) cannot fill `MAX_PENDING_HANDSHAKES` for every other home; when that
is full, the home with the most gives up its oldest (docs/operations.md, "Limits that
strangers cannot fill")."""
PENDING_TTL_S = 60.0
"""A handshake begun this long ago and neither finished nor aborted is dropped when room is
needed, seconds: a caller cancelled after its `begin` was sent (over a socket or TCP) never
aborts it, and a session's handshake lasts at most `handshake_s` (5 s)."""


class KeysError(Exception):
    """A keys-part request that cannot be served (unknown key or handshake, bad message 2,
    or the keys part unreachable), with its sentence. Two kinds are their own classes, since
    the pool answers them differently: `UnknownAgentKey` and `BadHandshakeMessage`; the
    class attributes `unknown_key` and `bad_message` say the same for a caller that holds a
    `KeysError` (and are what the keys socket and the TCP channel carry, as `unknownKey` and
    `badMessage`: keys/ops.py)."""

    unknown_key: ClassVar[bool] = False
    """The keys part holds no such agent key (`UnknownAgentKey`)."""
    bad_message: ClassVar[bool] = False
    """The box's message 2 failed the handshake (`BadHandshakeMessage`)."""


class UnknownAgentKey(KeysError):
    """The keys part holds no such agent key (never made, dropped, or another keys part's)."""

    unknown_key = True


class BadHandshakeMessage(KeysError):
    """The box's Noise message 2 failed the handshake (it does not decrypt or is malformed:
    PROTOCOL.md part A); the handshake is over."""

    bad_message = True


class KeysPort(Protocol):
    """What the pool and OAuth need of the keys part, in-process or over its socket."""

    @property
    def pending_handshakes(self) -> int:
        """Handshakes begun and neither finished nor aborted (the metrics gauge)."""

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


async def forget_dropped(
    keys: KeysPort, home: str, listed: frozenset[bytes], dropped: frozenset[bytes]
) -> frozenset[bytes]:
    """Apply `home`'s newest roster (its agent keys `listed`) to the keys part, where `dropped`
    are the agents that rosters since the last save dropped (some of which the keys part may
    never have seen listed, when rosters came faster than the applier). Returns every agent key
    whose tokens must go."""
    gone = frozenset(await keys.sync(home, listed))
    for key in dropped - listed - gone:
        await keys.drop(key)
    return dropped | gone


class Handshakes:
    """Noise IK handshakes begun as an agent and not yet finished or aborted (PROTOCOL.md part
    B: the bridge is the initiator): the one place a private key meets a box's key.

    Handles are this process's own counter (1, 2, ...); at most `MAX_PENDING_HANDSHAKES` wait
    at once, so a caller that never finishes cannot grow memory, and those older than
    `PENDING_TTL_S` make room for new ones; then the home with the most unfinished ones gives
    up its oldest, and one home has at most `PENDING_PER_HOME` (`fairshare.FairShare`).
    """

    def __init__(self) -> None:
        self._pending: dict[int, tuple[Initiator, float, str]] = {}
        self._ids = itertools.count(1)
        self._share: FairShare[int] = FairShare(MAX_PENDING_HANDSHAKES, PENDING_PER_HOME)

    def __len__(self) -> int:
        return len(self._pending)

    def begin(
        self, private: bytes | StaticKey, box_noise_key: bytes, *, now: float, home: str = ""
    ) -> tuple[int, bytes]:
        """Write message 1 as `private` (32 bytes, or parsed once: `StaticKey`) of an agent
        of `home` to `box_noise_key` at `now` (monotonic seconds); returns (handle, m1).

        Raises:
            KeysError: too many unfinished handshakes of `home` (or of every home, `home`
                holding the most); a box key that is not 32 bytes.
        """
        if len(self._pending) >= MAX_PENDING_HANDSHAKES:
            for handle in [h for h, p in self._pending.items() if now - p[1] >= PENDING_TTL_S]:
                self._forget(handle)
        try:
            initiator = Initiator(our_static=private, their_static=box_noise_key)
            message1 = initiator.write_message1()
        except ProtocolError as exc:  # a box key of the wrong size
            raise KeysError(str(exc)) from exc
        handle = next(self._ids)
        shed = self._share.admit(home, handle)
        if shed is None:
            raise KeysError("too many handshakes in progress")
        for old in shed:
            self._pending.pop(old, None)
        self._pending[handle] = (initiator, now, home)
        return handle, message1

    def _forget(self, handle: int) -> tuple[Initiator, float, str] | None:
        pending = self._pending.pop(handle, None)
        if pending is not None:
            self._share.release(pending[2], handle)
        return pending

    def finish(self, handle: int, message2: bytes) -> TransportKeys:
        """Read message 2 of `handle` (forgotten whatever the outcome).

        Raises:
            KeysError: unknown handle; `BadHandshakeMessage`: a message 2 that fails the
                handshake.
        """
        pending = self._forget(handle)
        if pending is None:
            raise KeysError("no such handshake")
        try:
            keys, _payload = pending[0].read_message2(message2)
        except ProtocolError as exc:
            raise BadHandshakeMessage(str(exc)) from exc
        return keys

    def abort(self, handle: int) -> None:
        """Forget an unfinished handshake (nothing if unknown)."""
        self._forget(handle)


@dataclass(slots=True)
class _Key:
    home: str
    private: bytes
    listed: bool = False
    parsed: StaticKey | None = field(default=None, compare=False, repr=False)
    """`private` parsed for handshakes (`StaticKey`): at `create`, or at the first handshake of
    a key read from the file (so starting with many keys parses none)."""

    def static_key(self) -> StaticKey:
        if self.parsed is None:
            self.parsed = StaticKey(self.private)
        return self.parsed


class KeysService:
    """`KeysPort` in-process; keys persist in `path` (0600, see `keyfile` for how it is written).

    Each change is applied to the file as a delta (keys added, flags changed, keys removed)
    under the file's lock, so another process writing the same file (`ftwbridge agent create`)
    and many homes changing rosters at once lose nothing.

    Args:
        path: the key file, or None to keep keys in memory only (tests).

    Raises:
        StateFileError: the key file exists and cannot be used (a sentence for the operator).
    """

    def __init__(self, path: Path | None) -> None:
        self._path = path
        self._keys: dict[bytes, _Key] = {}
        self._handshakes = Handshakes()
        self._forgotten: set[bytes] = set()
        self._lock = trio.Lock()
        self._unsaved: tuple[dict[bytes, _Key], set[bytes]] = ({}, set())
        """Changes a failed write left out; the next write carries them."""
        if path is not None:
            self._keys.update(_parse(read_json(path), path))

    async def _save(self, upserts: dict[bytes, _Key], removals: set[bytes]) -> None:
        """Apply this change to the file, in order with this process's other changes.

        A change that a failed write left out (a full disk, a damaged file) stays due and goes
        with the next write, so a forgotten key is removed from the file once writing works.

        Raises:
            StateFileError, OSError: the file could not be written now.
        """
        if self._path is None:
            return
        path = self._path
        due_rows, due_gone = self._unsaved
        upserts = {k: v for k, v in due_rows.items() if k not in removals} | upserts
        removals = (due_gone - set(upserts)) | removals
        self._unsaved = (upserts, removals)
        rows = {pub.hex(): _row(key) for pub, key in upserts.items()}
        gone = {pub.hex() for pub in removals}

        def change(value: Any) -> Any:
            current = dict(value) if isinstance(value, dict) else {}
            for pub in gone:
                current.pop(pub, None)
            current.update(rows)
            return current

        async with self._lock:
            written = await trio.to_thread.run_sync(update_json, path, change)
        if self._unsaved == (upserts, removals):
            self._unsaved = ({}, set())
        self._merge(_parse(written, path))

    def _merge(self, found: dict[bytes, _Key]) -> None:
        """Take keys another process (`ftwbridge agent create`) added to the file; keys this
        process forgot stay forgotten."""
        for pub, key in found.items():
            if pub not in self._keys and pub not in self._forgotten:
                self._keys[pub] = key

    @property
    def pending_handshakes(self) -> int:
        """Handshakes begun and neither finished nor aborted."""
        return len(self._handshakes)

    async def create(self, home: str) -> bytes:
        """See `KeysPort.create`."""
        private, public = generate_static()
        key = self._keys[public] = _Key(home, private, parsed=StaticKey(private))
        await self._save({public: key}, set())
        return public

    async def begin(self, agent_key: bytes, box_noise_key: bytes) -> tuple[int, bytes]:
        """See `KeysPort.begin`.

        Raises:
            KeysError: too many unfinished handshakes; `UnknownAgentKey`: unknown agent key.
        """
        key = self._keys.get(agent_key) or await self._reload(agent_key)
        if key is None:
            raise UnknownAgentKey("the keys part holds no such agent key")
        return self._handshakes.begin(
            key.static_key(), box_noise_key, now=trio.current_time(), home=key.home
        )

    async def finish(self, handle: int, message2: bytes) -> TransportKeys:
        """See `KeysPort.finish`.

        Raises:
            KeysError: unknown handle; `BadHandshakeMessage`: a message 2 that fails the
                handshake.
        """
        return self._handshakes.finish(handle, message2)

    async def abort(self, handle: int) -> None:
        """See `KeysPort.abort`."""
        self._handshakes.abort(handle)

    async def sync(self, home: str, listed: frozenset[bytes]) -> list[bytes]:
        """See `KeysPort.sync`: keys listed now are marked; keys listed before and not now go."""
        gone: list[bytes] = []
        marked: dict[bytes, _Key] = {}
        for pub, key in list(self._keys.items()):
            if key.home != home:
                continue
            if pub in listed:
                if not key.listed:
                    key.listed = True
                    marked[pub] = key
            elif key.listed:
                del self._keys[pub]
                self._forgotten.add(pub)
                gone.append(pub)
        if gone or marked:
            try:
                await self._save(marked, set(gone))
            except (StateFileError, OSError) as exc:  # kept due; the roster still applies
                log.error("agent keys file not written (the next change retries): %s", exc)
        return gone

    async def drop(self, agent_key: bytes) -> None:
        """See `KeysPort.drop`."""
        key = self._keys.get(agent_key)
        if key is not None and not key.listed:
            del self._keys[agent_key]
            self._forgotten.add(agent_key)
            try:
                await self._save({}, {agent_key})
            except (StateFileError, OSError) as exc:  # kept due for the next write
                log.error("agent keys file not written (the next change retries): %s", exc)

    async def has(self, agent_key: bytes) -> bool:
        """See `KeysPort.has`."""
        return agent_key in self._keys or await self._reload(agent_key) is not None

    async def _reload(self, agent_key: bytes) -> _Key | None:
        """Look in the file for a key another process added since we read it.

        Raises:
            KeysError: the file cannot be read now (its sentence says why).
        """
        if self._path is None:
            return None
        try:
            value = await trio.to_thread.run_sync(read_json, self._path)
            self._merge(_parse(value, self._path))
        except StateFileError as exc:
            raise KeysError(str(exc)) from exc
        return self._keys.get(agent_key)


def _row(key: _Key) -> dict[str, Any]:
    return {"home": key.home, "private": key.private.hex(), "listed": key.listed}


def _parse(value: Any, path: Path) -> dict[bytes, _Key]:
    """Keys from the file's JSON value (None: no file yet).

    Raises:
        StateFileError: a value that is not the key file's shape.
    """
    if value is None:
        return {}
    try:
        return {
            bytes.fromhex(pub): _Key(row["home"], bytes.fromhex(row["private"]), row["listed"])
            for pub, row in value.items()
        }
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise StateFileError(
            f"the agent keys file {path} does not hold agent keys ({type(exc).__name__});"
            " restore it from a backup, or move it aside to start with no agent keys"
        ) from exc
