"""`agent.request` to a home held by another instance, so that sign-in works at any instance.

A consent form posted at an instance that does not hold the home's uplink still has to reach
the box (PROTOCOL.md part C: bridge -> box `agent.request`). `BoxRelay.send` sends it through
this instance's door when the uplink is here, else POSTs it, signed like a forwarded call
(`signing`, over `RELAY_PATH`), to the holder's internal listener, whose `relay_route` checks
the signature (unsigned, forged, misaddressed, stale and replayed requests are refused 403 in
words), checks that it still holds the home at the epoch named (else 421, and the sender looks
up once more), and hands the message to its door. An offline home, or a holder that cannot be
reached, is `HomeOffline` at the sender: the consent page says `temporarily_unavailable`.

Body of the relayed request: a JSON object `{"home": str, "message": str}`, `message` the
door envelope (CBOR, PROTOCOL.md part A) in base64; only `agent.request` is relayed.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
from collections.abc import Awaitable, Callable

import httpx2
from quart import Response, request
from quart_trio import QuartTrio

from ftwbridge.door import HomeOffline
from ftwbridge.mcp.server import MESH_MOVED
from ftwbridge.proto.door import decode_door_message
from ftwbridge.proto.envelope import Envelope
from ftwbridge.proto.errors import RemoteProtocolError
from ftwbridge.proto.registry import Msg
from ftwbridge.store import StoreError
from ftwbridge.store.directory import Holder, Holders

from . import signing

log = logging.getLogger("ftwbridge.mesh")

RELAY_PATH = "/box/agent-request"
"""The internal listener's route for an `agent.request` relayed to the home's holder."""
MOVED = MESH_MOVED
"""The header of the holder's 421: it no longer holds the home at the epoch named."""
MAX_RELAY_BYTES = 96 * 1024
"""The largest relayed body, bytes: a 64 KiB door message in base64, with room to spare."""

SendHere = Callable[[str, Envelope], Awaitable[None]]


class BoxRelay:
    """Sends door messages to a home's box wherever its uplink is.

    Args:
        directory: who holds which home.
        here: home -> whether its uplink is at this instance's door now.
        send_here: this door's `send_to_box` (raises `HomeOffline`).
        http: the mesh's HTTP client (owned by the caller; `forward.new_client`).
        key: the 32-byte `mesh_key`.
        wall_ms: the wall clock, ms since the Unix epoch (the signature's time).
        require_tls: send only to `https://` holders (`mesh_cafile` is set); a plain-HTTP
            holder is treated as offline, with a warning.
    """

    def __init__(
        self,
        *,
        directory: Holders,
        here: Callable[[str], bool],
        send_here: SendHere,
        http: httpx2.AsyncClient,
        key: bytes,
        wall_ms: Callable[[], int],
        require_tls: bool = False,
    ) -> None:
        self._require_tls = require_tls
        self._directory = directory
        self._here = here
        self._send_here = send_here
        self._http = http
        self._key = key
        self._wall_ms = wall_ms

    def _check_tls(self, home: str, instance: str, url: str) -> None:
        """Refuse a plain-HTTP holder when TLS is required (`mesh_cafile`).

        Raises:
            HomeOffline: TLS is required and `url` is not `https://` (with a warning).
        """
        if self._require_tls and not url.startswith("https://"):
            log.warning(
                "agent.request for home %s: instance %s is at %s, not https: not sent"
                " (mesh_cafile is set)",
                home,
                instance,
                url,
            )
            raise HomeOffline(home)

    def _signed(self, holder: Holder, body: bytes) -> dict[str, str]:
        """The relayed request's headers, signed for `holder` at its epoch (`signing`)."""
        headers = signing.sign(
            self._key,
            sender=self._directory.instance_id,
            method="POST",
            path=RELAY_PATH,
            to=holder.instance,
            epoch=holder.epoch,
            body=body,
            now_ms=self._wall_ms(),
            headers=[("content-type", "application/json")],
        )
        headers["content-type"] = "application/json"
        return headers

    async def send(self, home: str, env: Envelope) -> None:
        """Send `env` to `home`'s box: through this door when its uplink is here, else to its
        holder's internal listener (a 421 or an unreachable holder: one fresh lookup and one
        more try).

        Raises:
            HomeOffline: no instance holds the home, the holder says it is offline, the
                holder cannot be reached twice, or the directory does not answer.
        """
        if self._here(home):
            await self._send_here(home, env)
            return
        body = json.dumps(
            {"home": home, "message": base64.b64encode(env.encode()).decode("ascii")}
        ).encode()
        for attempt in (1, 2):
            try:
                holder = await self._directory.holder(home)
            except StoreError as exc:
                log.warning("agent.request for home %s: no lookup (%s)", home, exc)
                raise HomeOffline(home) from None
            if holder is None or not holder.url:
                raise HomeOffline(home)
            if holder.instance == self._directory.instance_id:  # claimed here, uplink gone
                await self._send_here(home, env)
                return
            resp = await self._post(home, holder, body)
            if resp is None:
                continue
            if resp.status_code == 204:
                return
            if resp.status_code == 421 and resp.headers.get(MOVED):
                self._directory.forget(home, holder)
                if attempt == 1:
                    continue
            if resp.status_code != 503:
                log.warning(
                    "agent.request for home %s: instance %s answered %d: %s",
                    home,
                    holder.instance,
                    resp.status_code,
                    resp.text[:200],
                )
            raise HomeOffline(home)
        raise HomeOffline(home)

    async def _post(self, home: str, holder: Holder, body: bytes) -> httpx2.Response | None:
        """POST the signed relay `body` to `holder`'s internal listener; None when it cannot
        be reached (logged)."""
        self._check_tls(home, holder.instance, holder.url)
        headers = self._signed(holder, body)
        try:
            return await self._http.post(holder.url + RELAY_PATH, headers=headers, content=body)
        except httpx2.TransportError as exc:
            self._directory.forget(home, holder, unreachable=True)
            log.warning(
                "agent.request for home %s: instance %s not reached (%s)",
                home,
                holder.instance,
                type(exc).__name__,
            )
            return None


def _answer(status: int, words: str, headers: dict[str, str] | None = None) -> Response:
    body = json.dumps({"error": words})
    return Response(body, status, {"content-type": "application/json", **(headers or {})})


def _checked(
    checker: signing.Checker,
    body: bytes,
    now_ms: int,
    on_refused: Callable[[str], None] | None,
) -> signing.Signed | Response:
    """The current relay request's signature checked (`signing.Checker`): what it signed, or
    the 403 in words (logged, and its reason told `on_refused`)."""
    headers: dict[str, list[str]] = {}
    for name, value in request.headers.items():
        headers.setdefault(name.lower(), []).append(value)
    try:
        return checker.check("POST", RELAY_PATH, headers, body, now_ms)
    except signing.MeshRefused as exc:
        log.warning(
            "internal listener refused a relayed message from %s (%s): %s",
            request.remote_addr,
            exc.reason,
            exc.words,
        )
        if on_refused is not None:
            on_refused(exc.reason)
        return _answer(403, f"Relayed message refused: {exc.words}")


def _relayed(body: bytes) -> tuple[str, Envelope] | None:
    """A relay body's (home, door message), or None when it is not the relay's JSON object
    of a home and a base64 door message."""
    try:
        data = json.loads(body)
        home, message = data["home"], data["message"]
        if not isinstance(home, str) or not isinstance(message, str):
            return None
        return home, decode_door_message(base64.b64decode(message, validate=True))
    except (ValueError, KeyError, TypeError, binascii.Error, RemoteProtocolError):
        return None


def add_relay_route(
    app: QuartTrio,
    *,
    checker: signing.Checker,
    holds: Callable[[str, int], Awaitable[bool]],
    send_here: SendHere,
    wall_ms: Callable[[], int],
    on_refused: Callable[[str], None] | None = None,
) -> None:
    """Add `POST RELAY_PATH` to the internal listener's `app`: a relayed `agent.request`,
    checked like a forwarded call, given to this door's box.

    Answers: 204 sent; 400 a body that is not the relay's JSON or not an `agent.request`;
    403 unsigned, forged, misaddressed, stale or replayed (logged and counted by
    `on_refused`); 413 too large; 421 (with `MOVED`) the home is not held here at the epoch
    named; 503 the home's uplink is not here now. Each with a JSON `{"error": words}`.

    Args:
        checker: the internal listener's `signing.Checker` (nonces shared with `/mcp`).
        holds: async (home, epoch) -> whether this instance holds the home at that claim.
        send_here: this door's `send_to_box`.
        wall_ms: the wall clock, ms since the Unix epoch.
        on_refused: told the reason of each refused request (the metric).
    """

    @app.route(RELAY_PATH, methods=["POST"])
    async def relayed() -> Response:
        length = request.content_length
        if length is not None and length > MAX_RELAY_BYTES:
            return _answer(413, "the relayed message is too large")
        raw = await request.get_data(cache=False, as_text=False)
        body = raw if isinstance(raw, bytes) else raw.encode()
        if len(body) > MAX_RELAY_BYTES:
            return _answer(413, "the relayed message is too large")
        signed = _checked(checker, body, wall_ms(), on_refused)
        if isinstance(signed, Response):
            return signed
        relayed = _relayed(body)
        if relayed is None:
            return _answer(
                400, "the relayed body is not a JSON object with a home and a base64 door message"
            )
        home, env = relayed
        if env.t != Msg.AGENT_REQUEST:
            return _answer(400, "only agent.request is relayed")
        if not await holds(home, signed.epoch):
            return _answer(421, "this instance does not hold the home", {MOVED: "1"})
        try:
            await send_here(home, env)
        except HomeOffline:
            return _answer(503, "the home is offline")
        return Response(b"", 204)
