"""The keys part's requests and answers as CBOR maps, shared by the Unix socket (`wire.py`) and
the TCP channel (`listen.py`, `remote.py`).

A request is `{"op": name, ...}`: `create {home}`, `begin {key, noise}`, `finish {handle, m2}`,
`abort {handle}`, `sync {home, listed}`, `has {key}`, `drop {key}`. An answer is
`{"ok": value}` or `{"err": sentence, "unknownKey": bool, "badMessage": bool}`.
"""

from __future__ import annotations

from typing import Any

from ftwbridge.proto.noise import TransportKeys

from .service import KeysError, KeysPort


async def dispatch(service: KeysPort, req: Any) -> Any:
    """Serve one request on `service`; returns the `ok` value.

    Raises:
        KeysError: the service refused (its sentence), or the request is not a keys request.
        KeyError, TypeError, ValueError: a field is missing or of the wrong type.
    """
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
    raise KeysError(f"unknown op {str(op)[:40]!r}")


async def answer(service: KeysPort, req: Any) -> dict[str, Any]:
    """The answer map to `req`: `{"ok": ...}`, or `{"err": ...}` for any refusal or malformed
    request (never raises for what the peer sent)."""
    try:
        return {"ok": await dispatch(service, req)}
    except KeysError as exc:
        return {"err": str(exc), "unknownKey": exc.unknown_key, "badMessage": exc.bad_message}
    except (KeyError, TypeError, ValueError) as exc:
        return {"err": f"malformed request ({type(exc).__name__})"}


def result(reply: Any) -> Any:
    """The `ok` value of an answer map.

    Raises:
        KeysError: the answer is a refusal (its sentence and flags), or not an answer map.
    """
    if not isinstance(reply, dict):
        raise KeysError("the keys part answered nonsense")
    if "err" in reply:
        raise KeysError(
            str(reply["err"])[:300],
            unknown_key=reply.get("unknownKey") is True,
            bad_message=reply.get("badMessage") is True,
        )
    return reply.get("ok")


def transport_keys(value: Any) -> TransportKeys:
    """A `finish` answer's transport keys.

    Raises:
        KeysError: not the shape of a `finish` answer.
    """
    try:
        return TransportKeys(bytes(value["send"]), bytes(value["recv"]), bytes(value["hash"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise KeysError("the keys part answered nonsense") from exc
