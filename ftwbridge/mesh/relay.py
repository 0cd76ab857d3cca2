"""`agent.request` to a home held by another instance, so that sign-in works at any instance.

A consent form posted at an instance that does not hold the home's uplink still has to reach
the box (PROTOCOL.md part C: bridge -> box `agent.request`). `BoxRelay.send` sends it through
this instance's door when the uplink is here, else POSTs it, signed like a forwarded call
(`signing`, over `RELAY_PATH`), on the hop's channel (`mesh/channel.py`) to the holder's
internal listener, whose `RelayedMessages` checks
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

import trio

from ftwbridge.door import HomeOffline
from ftwbridge.mcp.server import MESH_MOVED, HttpResponse
from ftwbridge.proto.door import decode_door_message
from ftwbridge.proto.envelope import Envelope
from ftwbridge.proto.errors import RemoteProtocolError
from ftwbridge.proto.registry import Msg
from ftwbridge.store import StoreError
from ftwbridge.store.directory import Holder, Holders

from . import signing
from .channel import Answer, HopClient, Lost, NotReached
from .wire import Request

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
        hop: the hop's channel (owned by the caller).
        key: the 32-byte `mesh_key`.
        deadline_s: the longest a relayed message waits for the holder's answer, s.
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
        hop: HopClient,
        key: bytes,
        wall_ms: Callable[[], int],
        deadline_s: float = 30.0,
        require_tls: bool = False,
    ) -> None:
        self._require_tls = require_tls
        self._directory = directory
        self._here = here
        self._send_here = send_here
        self._hop = hop
        self._deadline_s = deadline_s
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

    def _signed(self, holder: Holder, body: bytes) -> list[tuple[str, str]]:
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
        return [("content-type", "application/json"), *headers.items()]

    async def send(self, home: str, env: Envelope) -> None:
        """Send `env` to `home`'s box: through this door when its uplink is here, else to its
        holder's internal listener (a 421 or a holder not reached: one fresh lookup and one
        more try; one that fails after the message went out is never sent it again).

        Raises:
            HomeOffline: no instance holds the home, the holder says it is offline, the
                holder cannot be reached twice, fails or does not answer within
                `deadline_s` once the message went out, or the directory does not answer.
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
            if resp.status == 204:
                return
            if resp.status == 421 and any(k == MOVED and v for k, v in resp.headers):
                self._directory.forget(home, holder)
                if attempt == 1:
                    continue
            if resp.status != 503:
                log.warning(
                    "agent.request for home %s: instance %s answered %d: %s",
                    home,
                    holder.instance,
                    resp.status,
                    resp.body[:200].decode("utf-8", "replace"),
                )
            raise HomeOffline(home)
        raise HomeOffline(home)

    async def _post(self, home: str, holder: Holder, body: bytes) -> Answer | None:
        """POST the signed relay `body` to `holder`'s internal listener; None when it was not
        reached (logged: look up once more).

        Raises:
            HomeOffline: it failed, or did not answer in `deadline_s`, once the body went out
                (never sent twice).
        """
        self._check_tls(home, holder.instance, holder.url)
        headers = self._signed(holder, body)
        try:
            with trio.fail_after(self._deadline_s):
                return await self._hop.request(holder.url, "POST", RELAY_PATH, headers, body)
        except NotReached as exc:
            self._directory.forget(home, holder, unreachable=True)
            log.warning(
                "agent.request for home %s: instance %s not reached (%s)",
                home,
                holder.instance,
                exc,
            )
            return None
        except (Lost, trio.TooSlowError) as exc:
            self._directory.forget(home, holder, unreachable=True)
            log.warning(
                "agent.request for home %s: instance %s took it but failed (%s)",
                home,
                holder.instance,
                str(exc) or "no answer in time",
            )
            raise HomeOffline(home) from None


def _answer(status: int, words: str, headers: dict[str, str] | None = None) -> HttpResponse:
    body = json.dumps({"error": words}).encode()
    return HttpResponse(status, {"content-type": "application/json", **(headers or {})}, body)


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


class RelayedMessages:
    """The internal listener's `POST RELAY_PATH`: a relayed `agent.request`, checked like a
    forwarded call, given to this door's box.

    Answers: 204 sent; 400 a body that is not the relay's JSON or not an `agent.request`;
    403 unsigned, forged, misaddressed, stale or replayed (logged and counted by
    `on_refused`); 405 not a POST; 413 larger than `MAX_RELAY_BYTES`; 421 (with `MOVED`)
    the home is not held here at the epoch named; 503 the home's uplink is not here now.
    Each with a JSON `{"error": words}`.

    Args:
        checker: the internal listener's `signing.Checker` (nonces shared with `/mcp`).
        holds: async (home, epoch) -> whether this instance holds the home at that claim.
        send_here: this door's `send_to_box`.
        wall_ms: the wall clock, ms since the Unix epoch.
        on_refused: told the reason of each refused request (the metric).
    """

    __slots__ = ("_checker", "_holds", "_on_refused", "_send_here", "_wall_ms")

    def __init__(
        self,
        *,
        checker: signing.Checker,
        holds: Callable[[str, int], Awaitable[bool]],
        send_here: SendHere,
        wall_ms: Callable[[], int],
        on_refused: Callable[[str], None] | None = None,
    ) -> None:
        self._checker = checker
        self._holds = holds
        self._send_here = send_here
        self._wall_ms = wall_ms
        self._on_refused = on_refused

    async def __call__(self, request: Request, peer: str) -> HttpResponse:
        """The answer to one whole request from `peer` (its address, for the log)."""
        if request.method != "POST":
            return _answer(405, "a relayed message is POSTed", {"allow": "POST"})
        body = request.body
        if len(body) > MAX_RELAY_BYTES:
            return _answer(413, "the relayed message is too large")
        try:
            signed = self._checker.check("POST", RELAY_PATH, request.headers, body, self._wall_ms())
        except signing.MeshRefused as exc:
            log.warning(
                "internal listener refused a relayed message from %s (%s): %s",
                peer,
                exc.reason,
                exc.words,
            )
            if self._on_refused is not None:
                self._on_refused(exc.reason)
            return _answer(403, f"Relayed message refused: {exc.words}")
        relayed = _relayed(body)
        if relayed is None:
            return _answer(
                400, "the relayed body is not a JSON object with a home and a base64 door message"
            )
        home, env = relayed
        if env.t != Msg.AGENT_REQUEST:
            return _answer(400, "only agent.request is relayed")
        if not await self._holds(home, signed.epoch):
            return _answer(421, "this instance does not hold the home", {MOVED: "1"})
        try:
            await self._send_here(home, env)
        except HomeOffline:
            return _answer(503, "the home is offline")
        return HttpResponse(204)
