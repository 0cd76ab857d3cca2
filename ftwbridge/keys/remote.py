"""`KeysPort` over TCP to one or more keys services (`keys_url`), on the mesh key's channel
(keys/mesh.py); docs/architecture.md, "What runs where".

Connections are kept open between requests (a pool per service, one request at a time on
each), so the handshake's round trips are paid once per connection, not per request. A
request goes to the service that last answered, and to the next one listed when that one
cannot be reached; `finish` and `abort` go where their `begin` went, since a handshake lives
in one keys service's memory. A refusal of the channel (another mesh key) is said at once in
one sentence; it is not tried elsewhere.
"""

from __future__ import annotations

import itertools
import logging
import ssl
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import trio

from ftwbridge.proto.noise import TransportKeys

from .mesh import Established, MeshChannel, Message, Refused
from .ops import as_bytes, as_list, result, transport_keys
from .service import KeysError

log = logging.getLogger("ftwbridge.keys")

CALL_S: Final = 10.0
"""The longest one request may take at one service, connecting and the handshake included,
seconds."""
CONNECT_S: Final = 2.0
"""The longest a new connection and its handshake may take before the next service listed is
tried, seconds: under the pool's 5 s for a session's handshake (`handshake_s`), so a service
whose host is gone without a word still leaves time for the next."""
KEEP_IDLE_S: Final = 60.0
"""A pooled connection idle longer than this is closed rather than used (the service closes
its side after 300 s), seconds."""
MAX_IDLE: Final = 8
"""Idle connections kept per keys service."""
MAX_CONNECTIONS: Final = 32
"""Connections open at once to one keys service (requests past it wait for one, within
`CALL_S`), so a burst of session openings cannot exhaust the service's connections."""
RECEIVE_BYTES: Final = 65536


def url_of(address: tuple[str, int]) -> str:
    """`tcp://host:port` of an address, as the operator wrote it in `keys_url`."""
    host, port = address
    return f"tcp://[{host}]:{port}" if ":" in host else f"tcp://{host}:{port}"


class ChannelRefused(KeysError):
    """The keys service refused this bridge's channel (another mesh key), or failed it: a
    setting to fix, said in one sentence naming the service."""


class _Unreachable(Exception):
    """This service could not be asked (connect, hang-up, deadline): try the next one."""


@dataclass(eq=False)
class _Conn:
    stream: trio.abc.Stream
    channel: MeshChannel
    idle_since: float = field(default=0.0)


class RemoteKeys:
    """`KeysPort` on keys services at `addresses` (host, port), tried in order, proving
    `mesh_key` (32 bytes), over TLS verified with `tls` when given (`mesh.tls.client_of`:
    the cluster's CA; docs/operations.md, "Trust across the internal hop"). Close with
    `aclose` (idle connections).

    Raises (every method):
        KeysError: the service refused (its sentence), refused the channel (another mesh
            key), or no listed service could be reached within `CALL_S`.
    """

    def __init__(
        self,
        addresses: Sequence[tuple[str, int]],
        mesh_key: bytes,
        *,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        if not addresses:
            raise ValueError("at least one keys service address")
        self._addresses = list(addresses)
        self._mesh_key = mesh_key
        self._tls = tls
        self._idle: dict[int, list[_Conn]] = {i: [] for i in range(len(addresses))}
        self._slots = [trio.CapacityLimiter(MAX_CONNECTIONS) for _ in addresses]
        self._preferred = 0
        self._handles: dict[int, tuple[int, int]] = {}
        self._ids = itertools.count(1)

    @property
    def pending_handshakes(self) -> int:
        """Handshakes this bridge began and has neither finished nor aborted."""
        return len(self._handles)

    async def aclose(self) -> None:
        """Close the idle connections."""
        for conns in self._idle.values():
            while conns:
                await trio.aclose_forcefully(conns.pop().stream)

    async def _connect(self, index: int) -> _Conn:
        host, port = self._addresses[index]
        with trio.move_on_after(CONNECT_S):
            try:
                tcp = await trio.open_tcp_stream(host, port)
            except OSError as exc:
                raise _Unreachable(exc.strerror or str(exc) or type(exc).__name__) from None
            stream = await self._secure(index, tcp)
            conn = _Conn(stream, MeshChannel(self._mesh_key, client=True))
            try:
                while not conn.channel.is_open:
                    await self._send(conn)
                    for event in await self._receive(conn):
                        if isinstance(event, Refused):
                            raise self._refused(index, event)
                await self._send(conn)
            except BaseException:
                await trio.aclose_forcefully(stream)
                raise
            return conn
        raise _Unreachable(f"no channel within {CONNECT_S:g} s")

    async def _secure(self, index: int, tcp: trio.SocketStream) -> trio.abc.Stream:
        """`tcp` as is, or wrapped in TLS with its handshake done (the caller bounds the time).

        Raises:
            ChannelRefused: the TLS handshake failed (a certificate the cluster's CA did not
                sign, another host name, a service that speaks no TLS).
        """
        if self._tls is None:
            return tcp
        host = self._addresses[index][0]
        stream = trio.SSLStream(tcp, self._tls, server_hostname=host)
        try:
            await stream.do_handshake()
        except trio.BrokenResourceError as exc:
            await trio.aclose_forcefully(tcp)
            why = exc.__cause__ if exc.__cause__ is not None else exc
            raise ChannelRefused(
                f"the keys service at {url_of(self._addresses[index])} failed TLS ({why}):"
                " is it serving internal_certfile, signed by the CA of mesh_cafile?"
            ) from None
        except BaseException:
            await trio.aclose_forcefully(tcp)
            raise
        return stream

    def _refused(self, index: int, event: Refused) -> ChannelRefused:
        where = url_of(self._addresses[index])
        if event.ours:
            return ChannelRefused(
                f"the keys service at {where} failed the channel: {event.sentence}"
            )
        return ChannelRefused(f"the keys service at {where} refused this bridge: {event.sentence}")

    async def _send(self, conn: _Conn) -> None:
        try:
            await conn.stream.send_all(conn.channel.data_to_send())
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            raise _Unreachable("the connection broke") from None

    async def _receive(self, conn: _Conn) -> list[Established | Message | Refused]:
        try:
            data = await conn.stream.receive_some(RECEIVE_BYTES)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            raise _Unreachable("the connection broke") from None
        if not data:
            raise _Unreachable("it hung up")
        return conn.channel.receive_data(data)

    async def _ask(self, index: int, req: dict[str, Any]) -> Any:
        """One request on a pooled or new connection to service `index`; a pooled one that
        turns out dead before answering (the service restarted) is replaced once."""
        now = trio.current_time()
        idle = self._idle[index]
        while idle:
            conn = idle.pop()
            if now - conn.idle_since < KEEP_IDLE_S:
                try:
                    return await self._exchange(index, conn, req)
                except _Unreachable:
                    break  # a stale connection: ask once on a fresh one
            await trio.aclose_forcefully(conn.stream)
        return await self._exchange(index, await self._connect(index), req)

    async def _exchange(self, index: int, conn: _Conn, req: dict[str, Any]) -> Any:
        done = False
        try:
            try:
                conn.channel.send_message(req)
            except ValueError as exc:  # a request over the frame cap: never sent
                raise KeysError(f"a keys request too large to send ({exc})") from None
            await self._send(conn)
            while True:
                for event in await self._receive(conn):
                    if isinstance(event, Refused):
                        raise self._refused(index, event)
                    if isinstance(event, Message):
                        done = True
                        return event.value
        finally:
            if done and len(self._idle[index]) < MAX_IDLE:
                conn.idle_since = trio.current_time()
                self._idle[index].append(conn)
            else:
                await trio.aclose_forcefully(conn.stream)

    async def _call(self, req: dict[str, Any], *, at: int | None = None) -> tuple[int, Any]:
        """Ask service `at`, or the preferred one and then the others in order; returns the
        index that answered and the `ok` value."""
        order = (
            [at]
            if at is not None
            else [(self._preferred + i) % len(self._addresses) for i in range(len(self._addresses))]
        )
        missed: list[str] = []
        for index in order:
            try:
                with trio.fail_after(CALL_S):
                    async with self._slots[index]:
                        reply = await self._ask(index, req)
            except _Unreachable as exc:
                missed.append(f"{url_of(self._addresses[index])} ({exc})")
                continue
            except trio.TooSlowError:
                missed.append(f"{url_of(self._addresses[index])} (no answer in {CALL_S:g} s)")
                continue
            if index != self._preferred and at is None:
                log.warning("keys service %s answers; using it", url_of(self._addresses[index]))
                self._preferred = index
            return index, result(reply)
        raise KeysError("no keys service answers: " + ", ".join(missed))

    async def create(self, home: str) -> bytes:
        """See `KeysPort.create`."""
        _at, value = await self._call({"op": "create", "home": home})
        return as_bytes(value)

    async def begin(self, agent_key: bytes, box_noise_key: bytes) -> tuple[int, bytes]:
        """See `KeysPort.begin`; the handle is this client's, mapped to the service's."""
        at, r = await self._call({"op": "begin", "key": agent_key, "noise": box_noise_key})
        try:
            theirs, m1 = int(r["handle"]), as_bytes(r["m1"])
        except (KeyError, TypeError, ValueError) as exc:
            raise KeysError("the keys part answered nonsense") from exc
        handle = next(self._ids)
        self._handles[handle] = (at, theirs)
        return handle, m1

    async def finish(self, handle: int, message2: bytes) -> TransportKeys:
        """See `KeysPort.finish`."""
        at, theirs = self._handles.pop(handle, (None, 0))
        if at is None:
            raise KeysError("no such handshake")
        _at, r = await self._call({"op": "finish", "handle": theirs, "m2": message2}, at=at)
        return transport_keys(r)

    async def abort(self, handle: int) -> None:
        """See `KeysPort.abort`."""
        at, theirs = self._handles.pop(handle, (None, 0))
        if at is not None:
            await self._call({"op": "abort", "handle": theirs}, at=at)

    async def sync(self, home: str, listed: frozenset[bytes]) -> list[bytes]:
        """See `KeysPort.sync`."""
        _at, value = await self._call({"op": "sync", "home": home, "listed": list(listed)})
        return as_list(value)

    async def has(self, agent_key: bytes) -> bool:
        """See `KeysPort.has`."""
        _at, value = await self._call({"op": "has", "key": agent_key})
        return bool(value)

    async def drop(self, agent_key: bytes) -> None:
        """See `KeysPort.drop`."""
        await self._call({"op": "drop", "key": agent_key})
