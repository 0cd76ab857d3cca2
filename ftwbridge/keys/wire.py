"""The keys part as its own process: a Unix-socket server and the matching client.

Each request is one connection carrying one CBOR map, length-prefixed (u32 big-endian), and
one answer back (`keys/ops.py` has the requests and answers).

One keys part serves a socket path at a time. The server holds an advisory lock
(`fcntl.flock` on `<socket>.lock`) for as long as it serves: a second server on the same path
finds the lock held and refuses (`KeysSocketError`) instead of taking the path over, and only
the holder ever unlinks the socket. The kernel drops the lock when its process dies however it
dies, so a socket file left by a dead process is stale and is taken over.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
from pathlib import Path
from typing import Any

import trio

from ftwbridge.listening import PatientListener
from ftwbridge.proto.envelope import dumps, loads
from ftwbridge.proto.errors import ProtocolError
from ftwbridge.proto.noise import TransportKeys

from .ops import answer, result, transport_keys
from .service import KeysError, KeysPort

MAX_REQUEST_BYTES = 64 * 1024
REQUEST_TIMEOUT_S = 5.0


async def _read_exactly(stream: trio.abc.ReceiveStream, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = await stream.receive_some(n - len(buf))
        if not chunk:
            raise KeysError("keys connection closed early")
        buf += chunk
    return bytes(buf)


async def _read_frame(stream: trio.abc.ReceiveStream) -> Any:
    size = int.from_bytes(await _read_exactly(stream, 4), "big")
    if size > MAX_REQUEST_BYTES:
        raise KeysError("keys message too large")
    try:
        return loads(await _read_exactly(stream, size))
    except ProtocolError as exc:
        raise KeysError("undecodable keys message") from exc


async def _write_frame(stream: trio.abc.SendStream, value: Any) -> None:
    data = dumps(value)
    await stream.send_all(len(data).to_bytes(4, "big") + data)


async def _handle(service: KeysPort, stream: trio.abc.Stream) -> None:
    async with stream:
        with trio.move_on_after(REQUEST_TIMEOUT_S):
            try:
                reply = await answer(service, await _read_frame(stream))
            except KeysError as exc:
                reply = {"err": str(exc), "unknownKey": False, "badMessage": False}
            except trio.BrokenResourceError:
                return
            try:
                await _write_frame(stream, reply)
            except trio.BrokenResourceError:
                return


class KeysSocketError(Exception):
    """The socket path cannot be served by this keys part; the message is one sentence for the
    operator, naming the path."""


def _claim_socket(path: Path) -> int:
    """Take the serving lock of `path` and clear a stale socket file there.

    Returns the lock's file descriptor (closing it releases the lock).

    Raises:
        KeysSocketError: another keys part holds the lock (it is serving `path`), `path` is
            something other than a socket, or its folder cannot be used.
    """
    try:
        fd = os.open(f"{path}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise KeysSocketError(f"cannot use {path}: {exc.strerror or exc}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            raise KeysSocketError(
                f"another keys part is already serving {path}; stop it first or choose another"
                " --socket"
            ) from None
        raise
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return fd
    if not stat.S_ISSOCK(mode):
        os.close(fd)
        raise KeysSocketError(
            f"{path} exists and is not a socket; remove it or choose another --socket"
        )
    path.unlink()  # we hold the lock, so whoever bound it is gone: a stale socket file
    return fd


def _release_socket(path: Path, bound: os.stat_result | None, lock_fd: int) -> None:
    """Unlink the socket we bound (only if the path still names it), then drop the lock."""
    try:
        if bound is not None:
            now = path.lstat()
            if (now.st_dev, now.st_ino) == (bound.st_dev, bound.st_ino):
                path.unlink()
    except FileNotFoundError:
        pass
    finally:
        os.close(lock_fd)


async def serve_keys(
    socket_path: Path,
    service: KeysPort,
    *,
    task_status: trio.TaskStatus[Path] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve `service` on a Unix socket at `socket_path` (mode 0600) until cancelled.

    Holds `<socket_path>.lock` while serving (module docstring); on the way out it removes the
    socket it bound, never one another process bound there.

    Raises:
        KeysSocketError: before reporting started, when another keys part serves `socket_path`,
            the path is not a socket, its folder cannot be used (`_claim_socket`), or the
            socket cannot be bound there (a path over the 107 bytes a Unix socket allows).
    """
    lock_fd = _claim_socket(socket_path)
    bound: os.stat_result | None = None
    listener: trio.SocketListener | None = None
    try:
        sock = trio.socket.socket(trio.socket.AF_UNIX, trio.socket.SOCK_STREAM)
        try:
            await sock.bind(str(socket_path))
        except OSError as exc:  # a path too long for a Unix socket, a folder we may not write
            sock.close()
            raise KeysSocketError(f"cannot serve on {socket_path}: {exc.strerror or exc}") from None
        except BaseException:
            sock.close()
            raise
        bound = os.lstat(socket_path)  # which socket is ours, for `_release_socket`
        os.chmod(socket_path, 0o600)
        sock.listen(128)
        listener = trio.SocketListener(sock)
        async with trio.open_nursery() as nursery:
            task_status.started(socket_path)

            async def handler(stream: trio.SocketStream) -> None:
                await _handle(service, stream)

            # accept's EMFILE and its kin waited out in sentences, not trio's tracebacks
            patient = PatientListener(listener, f"the keys socket {socket_path}")
            await trio.serve_listeners(handler, [patient], handler_nursery=nursery)
    finally:
        if listener is not None:
            with trio.CancelScope(shield=True):
                await listener.aclose()
        _release_socket(socket_path, bound, lock_fd)


class KeysClient:
    """`KeysPort` over the keys part's Unix socket; one connection per request.

    Raises (every method):
        KeysError: the keys part refused, or could not be reached.
    """

    def __init__(self, socket_path: Path) -> None:
        self._path = socket_path
        self._begun: set[int] = set()

    @property
    def pending_handshakes(self) -> int:
        """Handshakes this bridge began through the socket and has neither finished nor
        aborted (the keys process itself may hold more: a `begin` cut short by cancellation
        after it was sent)."""
        return len(self._begun)

    async def _call(self, req: dict[str, Any]) -> Any:
        try:
            stream = await trio.open_unix_socket(str(self._path))
        except OSError as exc:
            raise KeysError("the keys part is not reachable") from exc
        async with stream:
            try:
                await _write_frame(stream, req)
                reply = await _read_frame(stream)
            except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                raise KeysError("the keys part hung up") from exc
        return result(reply)

    async def create(self, home: str) -> bytes:
        """See `KeysPort.create`."""
        return bytes(await self._call({"op": "create", "home": home}))

    async def begin(self, agent_key: bytes, box_noise_key: bytes) -> tuple[int, bytes]:
        """See `KeysPort.begin`."""
        r = await self._call({"op": "begin", "key": agent_key, "noise": box_noise_key})
        handle = int(r["handle"])
        self._begun.add(handle)
        return handle, bytes(r["m1"])

    async def finish(self, handle: int, message2: bytes) -> TransportKeys:
        """See `KeysPort.finish`."""
        self._begun.discard(handle)  # the keys part forgets it whatever the answer
        r = await self._call({"op": "finish", "handle": handle, "m2": message2})
        return transport_keys(r)

    async def abort(self, handle: int) -> None:
        """See `KeysPort.abort`."""
        self._begun.discard(handle)
        await self._call({"op": "abort", "handle": handle})

    async def sync(self, home: str, listed: frozenset[bytes]) -> list[bytes]:
        """See `KeysPort.sync`."""
        return [
            bytes(k) for k in await self._call({"op": "sync", "home": home, "listed": list(listed)})
        ]

    async def has(self, agent_key: bytes) -> bool:
        """See `KeysPort.has`."""
        return bool(await self._call({"op": "has", "key": agent_key}))

    async def drop(self, agent_key: bytes) -> None:
        """See `KeysPort.drop`."""
        await self._call({"op": "drop", "key": agent_key})
