"""`/mcp` on plain ASGI: hypercorn hands each request straight to `McpService.handle`.

Quart cost each `/mcp` request about a quarter of the bridge's instructions per call
(docs/performance.md, "Instructions per call"): a request context, a reader task and a nursery
per request (quart-trio), Werkzeug's header and response objects, and a body sent in three
events. `/mcp` needs none of it: it reads one bounded body and answers one JSON or empty body.
`McpRoute` takes the HTTP scope whose path is exactly `/mcp` and does what the Quart shell did
around `McpService`, in the same order: the edge's framing and coding rules
(`framing.framing_problem`), the CORS preflight of an allowed origin, the Host and Origin checks
(DNS rebinding, MCP transports "Security Warning"), the body bounded in bytes and seconds, and
the CORS response headers. Every other scope goes to the next app unchanged.

A client that hangs up does not cancel its call: the call ends with its answer or at its
deadline, and the answer is dropped (hypercorn ignores sends after the connection closed). A
command's result is audited either way, with `delivered=no` when the client had left
(`client_gone`: hypercorn queued `http.disconnect` before the answer was ready).
"""

from __future__ import annotations

import contextlib
import json
import logging
import sqlite3
from collections.abc import Awaitable, Callable, MutableMapping
from typing import TYPE_CHECKING, Any

import trio
from mcp_types import jsonrpc

from ftwbridge.framing import framing_problem
from ftwbridge.statewords import oauth_words
from ftwbridge.store import StoreError

from . import inbound
from .server import BodyGone, BodyTooLarge, BodyTooSlow, HttpRequest, HttpResponse, McpService

if TYPE_CHECKING:
    from ftwbridge.site import Site

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
Asgi = Callable[..., Awaitable[None]]

MCP_PATH = "/mcp"
CORS_REQUEST_HEADERS = "authorization, content-type, mcp-protocol-version, mcp-method, mcp-name"
"""Request headers browser-based MCP clients send (MCP transports; the TypeScript SDK)."""
CORS_EXPOSED_HEADERS = "www-authenticate, mcp-protocol-version"
"""Response headers of `/mcp` a browser client must read: the 401's challenge (RFC 9728
section 5.1) and the revision. No `Mcp-Session-Id`: the 2026 revision has no sessions."""
_MISDIRECTED = b'{"error":"misdirected request"}'
_ORIGIN_REFUSED = (
    b'{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Origin not allowed"}}'
)
_JSON = "application/json"
JSONRPC_INTERNAL_ERROR = -32603
"""JSON-RPC 2.0's "Internal error" code (jsonrpc.org/specification, section 5.1)."""
STORE_RETRY_AFTER_S = 5
"""The `Retry-After` of a request refused because the database does not answer, seconds."""
STORE_WORDS = "the bridge's database does not answer; try again in a few seconds"
"""What a request refused for `StoreError` is told (no host: the log line names it)."""
STORE_HEADERS = {"retry-after": str(STORE_RETRY_AFTER_S), "cache-control": "no-store"}

log = logging.getLogger("ftwbridge.mcp")


def store_unavailable(words: str = STORE_WORDS) -> HttpResponse:
    """503 with `Retry-After` and a JSON-RPC error in words: `/mcp` needed the database while
    it does not answer (`StoreError`), or while the embedded store's file is full, cannot be
    written or is damaged (`words`: `statewords.oauth_words`, which name no folder)."""
    error = {"code": JSONRPC_INTERNAL_ERROR, "message": words}
    body = json.dumps({"jsonrpc": "2.0", "id": None, "error": error}).encode()
    return HttpResponse(503, {"content-type": _JSON, **STORE_HEADERS}, body)


def header_lists(raw: list[tuple[bytes, bytes]] | Any) -> dict[str, list[str]]:
    """ASGI headers (name, value byte pairs) as lower-case name -> every value, decoded as
    Latin-1 (RFC 9110 section 5.5: field values are octets; Latin-1 keeps each one)."""
    out: dict[str, list[str]] = {}
    for name, value in raw:
        out.setdefault(name.decode("latin-1").lower(), []).append(value.decode("latin-1"))
    return out


def _declared_length(headers: dict[str, list[str]]) -> int | None:
    values = headers.get("content-length")
    if not values:
        return None
    try:
        return int(values[0])
    except ValueError:
        return None  # h11 refuses such a request before any app sees it


def _has_body(headers: dict[str, list[str]]) -> bool:
    """Whether the request has a body to read: a `Transfer-Encoding`, or a `Content-Length`
    above 0 (RFC 9112 section 6.3: with neither, there is none)."""
    return "transfer-encoding" in headers or (_declared_length(headers) or 0) > 0


def queued_event(receive: Receive) -> MutableMapping[str, Any] | None:
    """The next ASGI event if hypercorn has queued it already (its `receive` is a trio memory
    channel's), else None; taken without a scheduler turn (trio makes every channel receive a
    checkpoint, and a request's body is nearly always queued before its app task first runs)."""
    channel = getattr(receive, "__self__", None)
    if isinstance(channel, trio.MemoryReceiveChannel):
        try:
            event: MutableMapping[str, Any] = channel.receive_nowait()
        except trio.WouldBlock:
            return None
        return event
    return None


async def receive_ready(receive: Receive) -> MutableMapping[str, Any]:
    """The next ASGI event: taken at once when hypercorn has queued it already
    (`queued_event`), else awaited."""
    event = queued_event(receive)
    return await receive() if event is None else event


def client_gone(
    receive: Receive, taken: Callable[[MutableMapping[str, Any]], None] | None = None
) -> Callable[[], bool]:
    """A check of whether the client has left: true once hypercorn has queued the ASGI
    `http.disconnect` event (it does when the connection closes). Only events already queued
    are taken (body chunks nobody will read are skipped, each handed to `taken` if given), so
    the check never waits; any other `receive` than a trio memory channel's is never consumed
    and reads as not gone."""
    channel = getattr(receive, "__self__", None)
    left = False

    def gone() -> bool:
        nonlocal left
        while not left and isinstance(channel, trio.MemoryReceiveChannel):
            try:
                event = channel.receive_nowait()
            except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                break
            if taken is not None:
                taken(event)
            left = event.get("type") == "http.disconnect"
        return left

    return gone


class _Gathered:
    """The body's chunks so far, bounded by `max_bytes`."""

    __slots__ = ("max_bytes", "parts", "size")

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.parts: list[bytes] = []
        self.size = 0

    def add(self, event: MutableMapping[str, Any]) -> bool:
        """Take one ASGI event of the body; True when it was the body's last.

        Raises:
            BodyTooLarge: more than `max_bytes` so far.
            BodyGone: not an `http.request` event (the client left).
        """
        if event["type"] != "http.request":
            raise BodyGone()
        chunk = event.get("body", b"")
        if chunk:
            self.size += len(chunk)
            if self.size > self.max_bytes:
                raise BodyTooLarge()
            self.parts.append(chunk)
        return not event.get("more_body", False)

    def body(self) -> bytes:
        """The chunks as one body."""
        return self.parts[0] if len(self.parts) == 1 else b"".join(self.parts)


async def read_body(
    receive: Receive, max_bytes: int, timeout_s: float, length: int | None = None
) -> bytes:
    """The whole request body from ASGI `http.request` events. What hypercorn has queued
    already is taken at once (no await, so no time bound to keep); a body whole by then (its
    last event taken, or the `length` bytes its `Content-Length` declared, which h11 never
    exceeds) is returned without a cancel scope or a turn; the rest is read within
    `timeout_s`.

    Raises:
        BodyTooLarge: more than `max_bytes` arrived.
        BodyTooSlow: it did not all arrive within `timeout_s` seconds.
        BodyGone: the client left first (`http.disconnect`).
    """
    gathered = _Gathered(max_bytes)
    event = queued_event(receive)
    while event is not None:
        if gathered.add(event) or gathered.size == length:
            return gathered.body()
        event = queued_event(receive)
    with trio.move_on_after(timeout_s):
        while True:
            if gathered.add(await receive_ready(receive)) or gathered.size == length:
                return gathered.body()
    raise BodyTooSlow()


async def respond(send: Send, resp: HttpResponse, *, head: bool = False) -> None:
    """Send `resp` as two ASGI events, with its `content-length`; no body bytes for HEAD
    (RFC 9110 section 9.3.2)."""
    headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in resp.headers.items()]
    headers.append((b"content-length", str(len(resp.body)).encode()))
    await send({"type": "http.response.start", "status": resp.status, "headers": headers})
    await send({"type": "http.response.body", "body": b"" if head else resp.body})


async def respond_stream(send: Send, receive: Receive, resp: HttpResponse) -> None:
    """Send `resp`'s head, then what `resp.stream` writes, each piece as it comes (no length:
    HTTP/1.1 chunked), until it returns; the client's close (`http.disconnect`) cancels it,
    which is how a client cancels a `subscriptions/listen` (docs/live.md)."""
    assert resp.stream is not None
    started = False

    async def start() -> None:
        headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in resp.headers.items()]
        await send({"type": "http.response.start", "status": resp.status, "headers": headers})

    async def write(chunk: bytes) -> None:
        nonlocal started
        if not started:  # the head goes with the first piece: `stream` runs from the start,
            started = True  # so whatever it holds is released by its own `finally`, and may
            await start()  # set the status and headers until then (a relayed stream does)
        await send({"type": "http.response.body", "body": chunk, "more_body": True})

    async with trio.open_nursery() as nursery:

        async def until_gone() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            nursery.cancel_scope.cancel()

        nursery.start_soon(until_gone)
        await resp.stream(write)
        nursery.cancel_scope.cancel()
    if not started:
        await start()
    await send({"type": "http.response.body", "body": b"", "more_body": False})


class _Body:
    """One request's body, read at most once: by the service when it needs it (`__call__`),
    else drained before the answer (`drain`).

    An answer given before the body (a 401 needs only the head) would leave h11 with the
    request unfinished, and hypercorn then closes the connection as soon as the answer is
    written. A client still sending its body meets a closed socket, its kernel gets a reset
    for its bytes, and the reset can destroy the answer before the client reads it
    (RFC 9112 section 9.6): the client sees the connection fail, not the 401. Drained first,
    within the body's own bounds, the answer arrives whole and the connection stays open.
    """

    __slots__ = ("length", "max_bytes", "read", "receive", "timeout_s")

    def __init__(
        self, receive: Receive, max_bytes: int, timeout_s: float, length: int | None = None
    ) -> None:
        self.receive = receive
        self.max_bytes = max_bytes
        self.timeout_s = timeout_s
        self.length = length
        """The declared `Content-Length`, if any (`read_body`'s `length`)."""
        self.read = False
        """Whether the body was read, or its last event (or the client's leaving) taken."""

    def taken(self, event: MutableMapping[str, Any]) -> None:
        """An event `client_gone` took: the body's last one, or the client gone, ends it."""
        if event.get("type") != "http.request" or not event.get("more_body", False):
            self.read = True

    async def __call__(self) -> bytes:
        """`read_body` within `max_bytes` and `timeout_s` (its errors raised)."""
        self.read = True
        return await read_body(self.receive, self.max_bytes, self.timeout_s, self.length)

    async def drain(self) -> None:
        """Read and drop the body nobody read, within the same bounds; a body over them, or a
        client gone, is left to the connection's close."""
        with contextlib.suppress(BodyTooLarge, BodyTooSlow, BodyGone):
            await self()


class McpRoute:
    """An ASGI app: HTTP requests to exactly `/mcp` answered by `service`, the rest to `app`.

    Args:
        app: the next ASGI app (the Quart app with OAuth and metadata routes).
        site: the public URL and the allowed Host and Origin values, read per request.
        service: answers each request (`McpService.handle` never raises for bad input).
        max_body_bytes: the body bound, bytes (413 past it).
        body_timeout_s: the whole body must arrive within this, seconds (408 after it).
    """

    __slots__ = ("app", "body_timeout_s", "max_body_bytes", "service", "site")

    def __init__(
        self,
        app: Asgi,
        *,
        site: Site,
        service: McpService,
        max_body_bytes: int,
        body_timeout_s: float,
    ) -> None:
        self.app = app
        self.site = site
        self.service = service
        self.max_body_bytes = max_body_bytes
        self.body_timeout_s = body_timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") != MCP_PATH:
            await self.app(scope, receive, send)
            return
        headers = header_lists(scope.get("headers", ()))
        method = str(scope.get("method", ""))
        origins = headers.get("origin")
        origin = origins[0] if origins else None
        allowed = origin is not None and origin.lower() in self.site.allowed_origins
        length = None if "transfer-encoding" in headers else _declared_length(headers)
        body = _Body(receive, self.max_body_bytes, self.body_timeout_s, length)
        resp = await self._answer(scope, method, headers, origin, allowed, body)
        if not body.read and _has_body(headers) and resp.headers.get("connection") != "close":
            await body.drain()
        if allowed and origin is not None:
            resp.headers = resp.headers | {
                "access-control-allow-origin": origin,
                "access-control-expose-headers": CORS_EXPOSED_HEADERS,
                "vary": "origin",
            }
        if resp.stream is not None:
            await respond_stream(send, receive, resp)
            return
        await respond(send, resp, head=method == "HEAD")

    async def _answer(
        self,
        scope: Scope,
        method: str,
        headers: dict[str, list[str]],
        origin: str | None,
        allowed: bool,
        body: _Body,
    ) -> HttpResponse:
        problem = framing_problem(headers)
        if problem is not None:
            status, words, extra = problem
            outcome = "bad_framing" if status == 400 else "bad_coding"
            self.service.refused_at_edge(outcome, status, headers)
            refusal = inbound.Rejection(status, jsonrpc.INVALID_REQUEST, words).body()
            return HttpResponse(
                status, {"content-type": _JSON, **extra}, json.dumps(refusal).encode()
            )
        if method == "OPTIONS" and allowed and "access-control-request-method" in headers:
            return HttpResponse(  # a CORS preflight (Fetch standard, "CORS protocol")
                204,
                {
                    "access-control-allow-methods": "POST, GET, DELETE",
                    "access-control-allow-headers": CORS_REQUEST_HEADERS,
                    "access-control-max-age": "600",
                },
            )
        host = (headers.get("host") or [""])[0].lower()
        if host not in self.site.allowed_hosts:
            self.service.refused_at_edge("host_refused", 421, headers)
            return HttpResponse(421, {"content-type": _JSON}, _MISDIRECTED)
        if origin is not None and not allowed:
            self.service.refused_at_edge("origin_refused", 403, headers)
            return HttpResponse(403, {"content-type": _JSON}, _ORIGIN_REFUSED)

        remote = self.site.scope_client(scope)  # the client's, behind trusted proxies
        req = HttpRequest(
            method,
            headers,
            body,
            _declared_length(headers),
            remote=remote,
            client_gone=client_gone(body.receive, body.taken),
        )
        try:
            return await self.service.handle(req)
        except StoreError as exc:
            log.warning("%s /mcp refused: %s", method, exc)
            return store_unavailable()
        except sqlite3.Error as exc:  # the embedded store's file; anything else as before
            told = oauth_words(exc)
            if told is None:
                raise
            log.error("%s /mcp failed on the state: %s", method, exc)
            return store_unavailable(told)
