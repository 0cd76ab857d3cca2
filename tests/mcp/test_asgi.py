"""`/mcp` on plain ASGI (`ftwbridge/mcp/asgi.py`): the events hypercorn sends, without sockets.

The live paths (real clients, the hostile HTTP corpus, the conformance suite) run through it in
tests/e2e, tests/edge and tests/peers; these pin the edges that are hard to reach from a socket.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import MutableMapping
from typing import Any, cast

import pytest
import trio

from ftwbridge.app import Site
from ftwbridge.mcp.asgi import McpRoute, client_gone, receive_ready
from ftwbridge.mcp.server import (
    BodyGone,
    BodyTooLarge,
    BodyTooSlow,
    HttpRequest,
    HttpResponse,
    McpService,
)
from ftwbridge.store import StoreError


class Service:
    """Stands in for `McpService`: reads the body the way it does, records what it saw."""

    def __init__(self, fail: BaseException | None = None) -> None:
        self.fail = fail
        self.seen: list[tuple[str, bytes | str]] = []
        self.refused: list[tuple[str, int]] = []

    def refused_at_edge(self, outcome: str, status: int, headers: dict[str, list[str]]) -> None:
        self.refused.append((outcome, status))

    async def handle(self, req: HttpRequest) -> HttpResponse:
        if self.fail is not None:
            raise self.fail
        try:
            body = await req.read_body()
        except (BodyTooLarge, BodyTooSlow, BodyGone) as exc:
            self.seen.append((req.method, type(exc).__name__))
            return HttpResponse(400)
        self.seen.append((req.method, body))
        return HttpResponse(200, {"content-type": "application/json"}, b'{"ok":true}')


class Peer:
    """hypercorn's side of one request: the events it delivers, and what the app sent."""

    def __init__(self, *events: dict[str, Any]) -> None:
        self.events = list(events)
        self.sent: list[MutableMapping[str, Any]] = []

    async def receive(self) -> MutableMapping[str, Any]:
        await trio.lowlevel.checkpoint()
        if not self.events:
            await trio.sleep_forever()
        return self.events.pop(0)

    async def send(self, event: MutableMapping[str, Any]) -> None:
        await trio.lowlevel.checkpoint()
        self.sent.append(event)

    @property
    def status(self) -> int:
        return int(self.sent[0]["status"])

    @property
    def headers(self) -> dict[str, str]:
        return {k.decode(): v.decode() for k, v in self.sent[0]["headers"]}

    @property
    def body(self) -> bytes:
        return b"".join(e.get("body", b"") for e in self.sent[1:])


def route(service: Service, max_body_bytes: int = 100) -> McpRoute:
    site = Site("http://bridge.test")
    site.allow_url("http://bridge.test")

    async def rest(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 404, "headers": []})
        await send({"type": "http.response.body", "body": b"elsewhere"})

    return McpRoute(
        rest,
        site=site,
        service=cast(McpService, service),
        max_body_bytes=max_body_bytes,
        body_timeout_s=5.0,
    )


def scope(method: str = "POST", path: str = "/mcp", **headers: str) -> dict[str, Any]:
    base = {"host": "bridge.test", "content-type": "application/json"}
    merged = base | {k.replace("_", "-"): v for k, v in headers.items()}
    return {
        "type": "http",
        "method": method,
        "path": path,
        "client": ("192.0.2.9", 4000),
        "headers": [(k.encode(), v.encode()) for k, v in merged.items()],
    }


def body(*chunks: bytes) -> list[dict[str, Any]]:
    last = len(chunks) - 1
    return [
        {"type": "http.request", "body": c, "more_body": i < last} for i, c in enumerate(chunks)
    ]


async def test_a_body_in_chunks_reaches_the_service_whole_with_its_length() -> None:
    service, peer = Service(), Peer(*body(b'{"a":', b"1}"))
    await route(service)(scope(), peer.receive, peer.send)
    assert service.seen == [("POST", b'{"a":1}')]
    assert peer.status == 200
    assert peer.headers["content-length"] == str(len(b'{"ok":true}'))
    assert peer.body == b'{"ok":true}'
    assert len(peer.sent) == 2  # start and one body event, nothing more


async def test_a_body_past_the_bound_is_too_large_before_it_is_all_read() -> None:
    service = Service()
    peer = Peer(*body(b"x" * 60, b"x" * 60, b"never read"))
    await route(service, max_body_bytes=100)(scope(), peer.receive, peer.send)
    assert service.seen == [("POST", "BodyTooLarge")]
    assert peer.events == [{"type": "http.request", "body": b"never read", "more_body": False}]


async def test_a_body_that_stops_coming_is_too_slow(autojump_clock: trio.abc.Clock) -> None:
    service, peer = Service(), Peer({"type": "http.request", "body": b"{", "more_body": True})
    await route(service)(scope(), peer.receive, peer.send)
    assert service.seen == [("POST", "BodyTooSlow")]


async def test_a_client_gone_mid_body_is_not_a_slow_body() -> None:
    service = Service()
    peer = Peer(
        {"type": "http.request", "body": b"{", "more_body": True}, {"type": "http.disconnect"}
    )
    await route(service)(scope(), peer.receive, peer.send)
    assert service.seen == [("POST", "BodyGone")]


async def test_head_gets_the_length_but_no_body_bytes() -> None:
    service, peer = Service(), Peer(*body(b""))
    await route(service)(scope("HEAD"), peer.receive, peer.send)
    assert peer.headers["content-length"] == str(len(b'{"ok":true}'))
    assert peer.body == b""


async def test_the_database_down_is_a_jsonrpc_503_in_words() -> None:
    service, peer = Service(StoreError("db.test does not answer")), Peer(*body(b"{}"))
    await route(service)(scope(), peer.receive, peer.send)
    assert peer.status == 503
    assert peer.headers["retry-after"] == "5"
    error = json.loads(peer.body)["error"]
    assert "database does not answer" in error["message"] and "db.test" not in error["message"]


@pytest.mark.parametrize(
    ("exc", "words"),
    [
        (sqlite3.OperationalError("database or disk is full"), "storage is full"),
        (sqlite3.OperationalError("attempt to write a readonly database"), "cannot save"),
        (sqlite3.DatabaseError("file is not a database"), "storage is damaged"),
    ],
)
async def test_the_embedded_stores_file_in_trouble_is_a_jsonrpc_503_in_words(
    exc: sqlite3.Error, words: str
) -> None:
    """A full disk, a folder that cannot be written or a damaged file met at `/mcp` (a token
    read from a damaged database): 503 and a JSON-RPC error in words, naming no folder (it
    was an empty 500)."""
    service, peer = Service(exc), Peer(*body(b"{}"))
    await route(service)(scope(), peer.receive, peer.send)
    assert peer.status == 503 and peer.headers["content-type"] == "application/json"
    error = json.loads(peer.body)["error"]
    assert error["code"] == -32603 and words in error["message"] and "/" not in error["message"]


async def test_another_sqlite_error_is_not_dressed_as_state_trouble() -> None:
    service, peer = Service(sqlite3.OperationalError("no such table: x")), Peer(*body(b"{}"))
    with pytest.raises(sqlite3.OperationalError):
        await route(service)(scope(), peer.receive, peer.send)


async def test_framing_host_and_origin_are_refused_and_audited_before_the_service() -> None:
    cases = [
        (scope(content_length="2", transfer_encoding="chunked"), 400, "bad_framing"),
        (scope(content_encoding="gzip"), 415, "bad_coding"),
        (scope(host="evil.test"), 421, "host_refused"),
        (scope(origin="http://evil.test"), 403, "origin_refused"),
    ]
    for sc, status, outcome in cases:
        service, peer = Service(), Peer(*body(b"{}"))
        await route(service)(sc, peer.receive, peer.send)
        assert (peer.status, service.refused, service.seen) == (status, [(outcome, status)], [])
    assert peer.body.startswith(b'{"jsonrpc":"2.0"')


async def test_an_allowed_origin_gets_its_preflight_and_the_exposed_headers() -> None:
    service, peer = Service(), Peer()
    sc = scope("OPTIONS", origin="http://bridge.test", access_control_request_method="POST")
    await route(service)(sc, peer.receive, peer.send)
    assert peer.status == 204 and service.seen == []
    assert peer.headers["access-control-allow-origin"] == "http://bridge.test"
    assert "mcp-protocol-version" in peer.headers["access-control-allow-headers"]
    service, peer = Service(), Peer(*body(b"{}"))
    await route(service)(scope(origin="http://bridge.test"), peer.receive, peer.send)
    assert "www-authenticate" in peer.headers["access-control-expose-headers"]


async def test_other_paths_and_scopes_go_to_the_next_app() -> None:
    for sc in (scope(path="/mcp/"), scope(path="/oauth/token"), {"type": "lifespan"}):
        service, peer = Service(), Peer()
        await route(service)(sc, peer.receive, peer.send)
        assert peer.status == 404 and service.seen == []


async def test_receive_ready_takes_a_queued_event_without_a_turn_and_waits_for_the_rest() -> None:
    send, receive = trio.open_memory_channel[MutableMapping[str, Any]](4)
    await send.send({"type": "http.request", "body": b"a"})
    turns = 0

    class Count(trio.abc.Instrument):
        def before_task_step(self, task: trio.lowlevel.Task) -> None:
            nonlocal turns
            turns += 1

    me = Count()
    trio.lowlevel.add_instrument(me)
    try:
        before = turns
        assert (await receive_ready(receive.receive))["body"] == b"a"
        assert turns == before  # taken at once: this task never gave up its turn
    finally:
        trio.lowlevel.remove_instrument(me)
    async with trio.open_nursery() as nursery:  # nothing queued: it waits as `receive` does
        nursery.start_soon(send.send, {"type": "http.request", "body": b"b"})
        assert (await receive_ready(receive.receive))["body"] == b"b"

    async def other() -> MutableMapping[str, Any]:  # not hypercorn's channel: awaited
        return {"type": "http.disconnect"}

    assert (await receive_ready(other))["type"] == "http.disconnect"


async def test_client_gone_reads_a_queued_disconnect_past_unread_body_and_never_waits() -> None:
    send, receive = trio.open_memory_channel[MutableMapping[str, Any]](4)
    gone = client_gone(receive.receive)
    assert not gone()  # nothing queued: still there, and no wait
    await send.send({"type": "http.request", "body": b"unread", "more_body": False})
    assert not gone()
    await send.send({"type": "http.disconnect"})
    assert gone() and gone()  # once gone, gone: the event is not needed again

    async def other() -> MutableMapping[str, Any]:  # not hypercorn's channel: never consumed
        raise AssertionError("client_gone must not await receive")

    assert not client_gone(other)()


class Refuser(Service):
    """Answers from the head alone, as the bearer check's 401 does: the body is never read."""

    async def handle(self, req: HttpRequest) -> HttpResponse:
        self.seen.append((req.method, "unread"))
        req.client_gone()  # as `McpService.handle` asks before it answers
        return HttpResponse(401, {"content-type": "application/json"}, b"{}")


class SlowBody(Peer):
    """A client whose body comes after its head: its events wait for `sent_body`."""

    def __init__(self, *events: dict[str, Any]) -> None:
        super().__init__(*events)
        self.sent_body = trio.Event()

    async def receive(self) -> MutableMapping[str, Any]:
        await self.sent_body.wait()
        return await super().receive()


async def test_an_answer_from_the_head_alone_waits_until_the_body_is_read(
    autojump_clock: trio.abc.Clock,
) -> None:
    """hypercorn closes a connection whose request is unfinished as soon as the answer is
    written; a client still sending its body then gets a reset that can destroy the answer
    (RFC 9112 section 9.6). The body is read (and dropped) first, so the answer comes whole
    on a connection that stays open."""
    service, peer = Refuser(), SlowBody(*body(b'{"jsonrpc":', b'"2.0"}'))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(route(service), scope(content_length="15"), peer.receive, peer.send)
        await trio.sleep(1.0)
        assert peer.sent == []  # no answer while the body is still coming
        peer.sent_body.set()
    assert peer.status == 401 and peer.events == [] and service.seen == [("POST", "unread")]


async def test_a_body_that_never_comes_gets_the_answer_after_the_body_bound(
    autojump_clock: trio.abc.Clock,
) -> None:
    """The drain keeps the body's own bounds: a body that never comes holds the answer for
    `body_timeout_s` (5 s here), no longer; a request with no body is answered at once."""
    service, peer = Refuser(), Peer({"type": "http.request", "body": b"{", "more_body": True})
    start = trio.current_time()
    await route(service)(scope(content_length="15"), peer.receive, peer.send)
    assert peer.status == 401 and trio.current_time() - start == 5.0
    service, peer = Refuser(), Peer()  # no body: nothing to wait for
    await route(service)(scope(), peer.receive, peer.send)
    assert peer.status == 401 and trio.current_time() - start == 5.0


async def test_a_body_the_gone_check_took_is_not_waited_for(
    autojump_clock: trio.abc.Clock,
) -> None:
    """hypercorn's queue held the whole body when the answer was ready; the check of whether
    the client left took it (it skips body chunks): the answer goes at once, not after
    `body_timeout_s`."""
    send, receive = trio.open_memory_channel[MutableMapping[str, Any]](4)
    for event in body(b'{"jsonrpc":', b'"2.0"}'):
        send.send_nowait(event)
    service, peer = Refuser(), Peer()
    start = trio.current_time()
    await route(service)(scope(content_length="15"), receive.receive, peer.send)
    assert peer.status == 401 and trio.current_time() - start == 0.0


def _queued(*events: dict[str, Any]) -> Any:
    send, receive = trio.open_memory_channel[MutableMapping[str, Any]](len(events) + 1)
    for event in events:
        send.send_nowait(event)
    return receive.receive


async def test_a_body_whose_declared_length_came_is_read_before_its_end_event(
    autojump_clock: trio.abc.Clock,
) -> None:
    """hypercorn queues a body's data and its end (`more_body` false) as two events, and h11
    never passes more than `Content-Length`: once that many bytes came, the body is whole
    and is read at once, not when the end event comes (here never: before, a 408 at 5 s)."""
    data = {"type": "http.request", "body": b'{"a":1}', "more_body": True}
    start = trio.current_time()
    service, peer = Service(), Peer()
    await route(service)(scope(content_length="7"), _queued(data), peer.send)
    assert service.seen == [("POST", b'{"a":1}')] and peer.status == 200
    assert trio.current_time() - start == 0.0
    short = {"type": "http.request", "body": b"{", "more_body": True}
    service = Service()  # short of its length, then the client gone: as before
    await route(service)(
        scope(content_length="7"), _queued(short, {"type": "http.disconnect"}), peer.send
    )
    assert service.seen == [("POST", "BodyGone")]
    service = Service()  # short of it, and nothing more comes: too slow, at 5 s
    await route(service)(scope(content_length="7"), _queued(short), peer.send)
    assert service.seen == [("POST", "BodyTooSlow")]
    assert trio.current_time() - start == 5.0
