"""The keys part's requests and answers as CBOR maps, shared by the Unix socket (`wire.py`) and
the TCP channel (`listen.py`, `remote.py`).

A request is `{"op": name, ...}`: `create {home}`, `begin {key, noise}`, `finish {handle, m2}`,
`abort {handle}`, `sync {home, listed}`, `has {key}`, `drop {key}`. An answer is
`{"ok": value}` or `{"err": sentence, "unknownKey": bool, "badMessage": bool}`.
"""

from __future__ import annotations

import logging
from typing import Any

from ftwbridge.proto.noise import TransportKeys

from .keyfile import StateFileError
from .service import BadHandshakeMessage, KeysError, KeysPort, UnknownAgentKey

log = logging.getLogger("ftwbridge.keys")


def _field(req: dict[Any, Any], name: str, kind: type) -> Any:
    """`req[name]`, which must be of `kind` (bytes, str or int; never a bool for int).

    Raises:
        TypeError: missing, or of another type (`bytes(5)` would make five zero bytes, and
            `bytes(10**9)` a gigabyte, so nothing is converted).
    """
    value = req.get(name)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise TypeError(name)
    return value


async def dispatch(service: KeysPort, req: Any) -> Any:
    """Serve one request on `service`; returns the `ok` value.

    Raises:
        KeysError: the service refused (its sentence), or the request is not a keys request.
        TypeError: a field is missing or of the wrong type.
    """
    if not isinstance(req, dict):
        raise KeysError("request is not a map")
    op = req.get("op")
    if op == "create":
        return await service.create(_field(req, "home", str))
    if op == "begin":
        handle, m1 = await service.begin(_field(req, "key", bytes), _field(req, "noise", bytes))
        return {"handle": handle, "m1": m1}
    if op == "finish":
        k = await service.finish(_field(req, "handle", int), _field(req, "m2", bytes))
        return {"send": k.send_key, "recv": k.recv_key, "hash": k.handshake_hash}
    if op == "abort":
        await service.abort(_field(req, "handle", int))
        return None
    if op == "sync":
        listed = _field(req, "listed", list)
        if not all(isinstance(k, bytes) for k in listed):
            raise TypeError("listed")
        return await service.sync(_field(req, "home", str), frozenset(listed))
    if op == "drop":
        await service.drop(_field(req, "key", bytes))
        return None
    if op == "has":
        return await service.has(_field(req, "key", bytes))
    raise KeysError(f"unknown op {str(op)[:40]!r}")


async def answer(service: KeysPort, req: Any) -> dict[str, Any]:
    """The answer map to `req`: `{"ok": ...}`, or `{"err": ...}` for any refusal or malformed
    request (never raises for what the peer sent)."""
    try:
        return {"ok": await dispatch(service, req)}
    except KeysError as exc:
        return {"err": str(exc), "unknownKey": exc.unknown_key, "badMessage": exc.bad_message}
    except (TypeError, ValueError) as exc:  # ValueError: a Noise key of the wrong size
        return {"err": f"malformed request ({type(exc).__name__}: {str(exc)[:40]})"}
    except (StateFileError, OSError) as exc:  # the key file cannot be written now
        log.error("keys request not served: %s", exc)
        return {"err": "the keys part cannot write its key file now"}


def result(reply: Any) -> Any:
    """The `ok` value of an answer map.

    Raises:
        KeysError: the answer is a refusal (its sentence; `UnknownAgentKey` or
            `BadHandshakeMessage` when its flags say so), or not an answer map.
    """
    if not isinstance(reply, dict):
        raise KeysError("the keys part answered nonsense")
    if "err" in reply:
        kind = (
            UnknownAgentKey
            if reply.get("unknownKey") is True
            else BadHandshakeMessage
            if reply.get("badMessage") is True
            else KeysError
        )
        raise kind(str(reply["err"])[:300])
    return reply.get("ok")


def as_bytes(value: Any) -> bytes:
    """A bytes field of an answer.

    Raises:
        KeysError: not bytes.
    """
    if not isinstance(value, bytes):
        raise KeysError("the keys part answered nonsense")
    return value


def as_list(value: Any) -> list[bytes]:
    """A list-of-bytes field of an answer (the keys `sync` forgot).

    Raises:
        KeysError: not a list of bytes.
    """
    if not isinstance(value, list) or not all(isinstance(k, bytes) for k in value):
        raise KeysError("the keys part answered nonsense")
    return list(value)


def transport_keys(value: Any) -> TransportKeys:
    """A `finish` answer's transport keys.

    Raises:
        KeysError: not the shape of a `finish` answer.
    """
    try:
        return TransportKeys(bytes(value["send"]), bytes(value["recv"]), bytes(value["hash"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise KeysError("the keys part answered nonsense") from exc
