"""The keys part as its own process: a Unix-socket server and the matching client.

Each request is one connection carrying one CBOR map, length-prefixed (u32 big-endian), and
one answer back: `{"ok": value}` or `{"err": text}`. Requests: `create {home}`, `begin
{key, noise}`, `finish {handle, m2}`, `abort {handle}`, `sync {home, listed}`, `has {key}`,
`drop {key}`.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import trio

from ftwbridge.proto.envelope import dumps, loads
from ftwbridge.proto.errors import ProtocolError
from ftwbridge.proto.noise import TransportKeys

from .service import KeysError, KeysService

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


async def _dispatch(service: KeysService, req: Any) -> Any:
    if not isinstance(req, dict):
        raise KeysError("request is not a map")
    op = req.get("op")
    if op == "create":
        return await service.create(str(req["home"]))
    if op == "begin":
        handle, m1 = await service.begin(bytes(req["key"]), bytes(req["noise"]))
        return {"handle": handle, "m1": m1}
    if op == "finish":
        k = await service.finish(int(req["handle"]), bytes(req["m2"]))
        return {"send": k.send_key, "recv": k.recv_key, "hash": k.handshake_hash}
    if op == "abort":
        await service.abort(int(req["handle"]))
        return None
    if op == "sync":
        return await service.sync(str(req["home"]), frozenset(map(bytes, req["listed"])))
    if op == "drop":
        await service.drop(bytes(req["key"]))
        return None
    if op == "has":
        return await service.has(bytes(req["key"]))
    raise KeysError(f"unknown op {op!r}")


async def _handle(service: KeysService, stream: trio.abc.Stream) -> None:
    async with stream:
        with trio.move_on_after(REQUEST_TIMEOUT_S):
            try:
                req = await _read_frame(stream)
                answer: Any = {"ok": await _dispatch(service, req)}
            except KeysError as exc:
                answer = {
                    "err": str(exc),
                    "unknownKey": exc.unknown_key,
                    "badMessage": exc.bad_message,
                }
            except (KeyError, TypeError, ValueError) as exc:
                answer = {"err": str(exc) or type(exc).__name__}
            except trio.BrokenResourceError:
                return
            try:
                await _write_frame(stream, answer)
            except trio.BrokenResourceError:
                return


def _clear_socket(path: Path) -> None:
    if path.exists() and stat.S_ISSOCK(path.stat().st_mode):
        path.unlink()


async def serve_keys(
    socket_path: Path,
    service: KeysService,
    *,
    task_status: trio.TaskStatus[Path] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve `service` on a Unix socket at `socket_path` (mode 0600) until cancelled."""
    _clear_socket(socket_path)
    sock = trio.socket.socket(trio.socket.AF_UNIX, trio.socket.SOCK_STREAM)
    await sock.bind(str(socket_path))
    os.chmod(socket_path, 0o600)
    sock.listen(128)
    listener = trio.SocketListener(sock)
    try:
        async with trio.open_nursery() as nursery:
            task_status.started(socket_path)

            async def handler(stream: trio.SocketStream) -> None:
                await _handle(service, stream)

            await trio.serve_listeners(handler, [listener], handler_nursery=nursery)
    finally:
        with trio.CancelScope(shield=True):
            await listener.aclose()
        _clear_socket(socket_path)


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
                answer = await _read_frame(stream)
            except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                raise KeysError("the keys part hung up") from exc
        if not isinstance(answer, dict) or "err" in answer:
            if not isinstance(answer, dict):
                raise KeysError("the keys part answered nonsense")
            raise KeysError(
                str(answer["err"]),
                unknown_key=answer.get("unknownKey") is True,
                bad_message=answer.get("badMessage") is True,
            )
        return answer.get("ok")

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
        return TransportKeys(bytes(r["send"]), bytes(r["recv"]), bytes(r["hash"]))

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
