"""The forwarder's decisions, with a directory in memory and a hop channel whose other
instances are functions of httpx2's request and response values (`MockHop`): when it answers
here, what it sends, when it looks up again and sends once more, and when a call ends because
its holder failed. No sockets; trio's clock only paces the entry's guard. The channel itself
over real sockets: tests/cluster/test_channel.py."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import httpx2
import pytest
import trio

from ftwbridge.mcp.server import HttpRequest, HttpResponse
from ftwbridge.mesh import signing
from ftwbridge.mesh.channel import Answer, HopClient, Lost, NotReached
from ftwbridge.mesh.forward import Forwarder
from ftwbridge.proto.refusal import Refusal
from ftwbridge.store import hash_token
from ftwbridge.store.directory import Holder

KEY = bytes(range(32))
NOW = 1_800_000_000_000
BODY = b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}'


class Directory:
    """Answers `holder` from a list, one entry a lookup (the last repeats)."""

    instance_id = "b-1"

    def __init__(self, *holders: Holder | None) -> None:
        self.holders = list(holders)
        self.lookups = 0
        self.forgotten: list[tuple[str, Holder, bool]] = []

    async def holder(self, home: str) -> Holder | None:
        self.lookups += 1
        return self.holders[min(self.lookups, len(self.holders)) - 1]

    def forget(self, home: str, holder: Holder, *, unreachable: bool = False) -> None:
        self.forgotten.append((home, holder, unreachable))


class MockHop(HopClient):
    """`HopClient` whose holders are `handler`: a `httpx2.ConnectError` it raises means not
    reached, any other transport error lost after sending."""

    def __init__(self, handler: Callable[[httpx2.Request], Any]) -> None:
        super().__init__(idle_s=1)
        self.handler = handler

    async def request(
        self, url: str, method: str, path: str, headers: list[tuple[str, str]], body: bytes
    ) -> Answer:
        request = httpx2.Request(method, url + path, headers=headers, content=body)
        try:
            resp = self.handler(request)
            if inspect.isawaitable(resp):
                resp = await resp
        except httpx2.ConnectError as exc:
            raise NotReached(str(exc)) from exc
        except httpx2.TransportError as exc:
            raise Lost(str(exc)) from exc
        pairs = [(k.lower(), v) for k, v in resp.headers.multi_items()]
        return Answer(resp.status_code, pairs, resp.content)


async def _never_held(home: str, epoch: int) -> bool:
    return False


def _forwarder(
    directory: Directory,
    handler: Callable[[httpx2.Request], Any],
    here: Callable[[str], bool] = lambda home: False,
    *,
    require_tls: bool = False,
) -> Forwarder:
    return Forwarder(
        directory=directory,
        holds=_never_held,
        here=here,
        hop=MockHop(handler),
        key=KEY,
        wall_ms=lambda: NOW,
        http_burst=1,
        http_per_s=1,
        require_tls=require_tls,
    )


def _request(**headers: str) -> HttpRequest:
    async def body() -> bytes:
        return BODY

    sent = {"content-type": ["application/json"], "authorization": ["Bearer t"]}
    sent.update({k: [v] for k, v in headers.items()})
    return HttpRequest("POST", sent, body, len(BODY), remote="192.0.2.1")


B2 = Holder("b-2", 7, "http://b2.internal:8782")
B3 = Holder("b-3", 8, "http://b3.internal:8782")


async def test_it_answers_here_when_this_instance_or_nobody_holds_the_home() -> None:
    def never(request: httpx2.Request) -> httpx2.Response:
        raise AssertionError("nothing is sent")

    for holder in (None, Holder("b-1", 3, "http://b1.internal")):
        assert await _forwarder(Directory(holder), never).forward("h", _request(), BODY, 1) is None


async def test_a_home_whose_uplink_is_here_is_answered_here_with_no_lookup() -> None:
    """No directory query for a call at the home's holder: none of its time, and none of the
    2 s wait for a connection while PostgreSQL does not answer."""

    def never(request: httpx2.Request) -> httpx2.Response:
        raise AssertionError("nothing is sent")

    directory = Directory(B2)  # stale: the directory would send it to b-2
    forwarder = _forwarder(directory, never, here=lambda home: home == "h")
    assert await forwarder.forward("h", _request(), BODY, 1) is None
    assert directory.lookups == 0
    seen: list[httpx2.Request] = []

    def answer(request: httpx2.Request) -> httpx2.Response:
        seen.append(request)
        return httpx2.Response(200, json={"ok": True})

    other = _forwarder(Directory(B2), answer, here=lambda home: home == "h")
    assert await other.forward("elsewhere", _request(), BODY, 1) is not None and len(seen) == 1


async def test_the_request_goes_whole_and_signed_and_the_answer_comes_back() -> None:
    seen: list[httpx2.Request] = []

    def holder(request: httpx2.Request) -> httpx2.Response:
        seen.append(request)
        return httpx2.Response(200, headers={"x-answer": "yes"}, content=b'{"ok":1}')

    fwd = _forwarder(Directory(B2), holder)
    # a client's own mesh headers never pass: the entry signs afresh
    answer = await fwd.forward("h", _request(**{"ftw-mesh-to": "b-9;1"}), BODY, 1)
    assert isinstance(answer, HttpResponse)
    assert (answer.status, answer.body, answer.headers["x-answer"]) == (200, b'{"ok":1}', "yes")
    (sent,) = seen
    assert str(sent.url) == "http://b2.internal:8782/mcp" and sent.content == BODY
    # the verified token's digest goes in its place: the token never crosses the hop
    assert "authorization" not in sent.headers
    assert sent.headers[signing.TOKEN] == hash_token("t").hex()
    headers = {k: sent.headers.get_list(k) for k in sent.headers}
    checked = signing.Checker(KEY, "b-2").check("POST", "/mcp", headers, BODY, NOW)
    assert checked.epoch == 7 and checked.token_digest == hash_token("t")


async def test_a_421_from_the_holder_means_one_more_lookup() -> None:
    urls: list[str] = []

    def moved_then_ok(request: httpx2.Request) -> httpx2.Response:
        urls.append(str(request.url))
        if len(urls) == 1:
            return httpx2.Response(421, headers={"ftw-mesh-moved": "1"})
        return httpx2.Response(200, content=b"{}")

    directory = Directory(B2, B3)
    answer = await _forwarder(directory, moved_then_ok).forward("h", _request(), BODY, 1)
    assert isinstance(answer, HttpResponse) and answer.status == 200
    assert urls == ["http://b2.internal:8782/mcp", "http://b3.internal:8782/mcp"]
    assert directory.forgotten == [("h", B2, False)]  # the next lookup must not name b-2
    # moved twice: the call ends in words rather than chasing the home
    directory = Directory(B2, B3)

    def always_moved(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(421, headers={"ftw-mesh-moved": "1"})

    ended = await _forwarder(directory, always_moved).forward("h", _request(), BODY, 1)
    assert ended == Refusal("E_UNAVAILABLE", {"reason": "holder_unreachable"})
    assert directory.lookups == 2


async def test_a_holder_not_reached_is_looked_up_again_and_tried_once_more() -> None:
    urls: list[str] = []

    def refused_then_ok(request: httpx2.Request) -> httpx2.Response:
        urls.append(str(request.url))
        if len(urls) == 1:
            raise httpx2.ConnectError("connection refused", request=request)
        return httpx2.Response(200, content=b"{}")

    directory = Directory(B2, B3)
    fwd = _forwarder(directory, refused_then_ok)
    answer = await fwd.forward("h", _request(), BODY, 1)
    assert isinstance(answer, HttpResponse) and answer.status == 200
    assert len(urls) == 2 and fwd.stats.unreachable == 1
    assert directory.forgotten == [("h", B2, True)]
    # the new lookup finds the home here now (the box redialed this instance): answered here
    fwd = _forwarder(Directory(B2, Holder("b-1", 9, "")), refused_then_ok)
    urls.clear()
    assert await fwd.forward("h", _request(), BODY, 1) is None


@pytest.mark.parametrize("fault", [httpx2.ReadError, httpx2.RemoteProtocolError])
async def test_a_holder_that_fails_after_the_request_went_out_ends_the_call(
    fault: type[httpx2.TransportError],
) -> None:
    sent: list[httpx2.Request] = []

    def dies(request: httpx2.Request) -> httpx2.Response:
        sent.append(request)
        raise fault("connection reset", request=request)

    fwd = _forwarder(Directory(B2, B3), dies)
    ended = await fwd.forward("h", _request(), BODY, 1)
    assert ended == Refusal("E_UNAVAILABLE", {"reason": "holder_lost"})
    assert len(sent) == 1 and fwd.stats.holder_lost == 1  # never sent twice


async def test_the_entry_keeps_a_coarse_guard_per_address(autojump_clock: object) -> None:
    def ok(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, content=b"{}")

    fwd = _forwarder(Directory(B2), ok)  # burst 1 x 4, 4 a second
    for _ in range(4):
        answer = await fwd.forward("h", _request(), BODY, 1)
        assert isinstance(answer, HttpResponse) and answer.status == 200
    limited = await fwd.forward("h", _request(), BODY, 5)
    assert isinstance(limited, HttpResponse) and limited.status == 429
    assert b'"id":5' in limited.body and limited.headers["retry-after"] == "1"
    await trio.sleep(0.25)
    answer = await fwd.forward("h", _request(), BODY, 1)
    assert isinstance(answer, HttpResponse) and answer.status == 200


async def test_with_tls_required_a_plain_http_holder_is_never_sent_the_token() -> None:
    """`mesh_cafile` set: the bearer token never crosses the hop in clear; an https holder is
    sent the request as usual, and the holder reads only the headers the signature covers."""
    seen: list[httpx2.Request] = []

    def holder(request: httpx2.Request) -> httpx2.Response:
        seen.append(request)
        return httpx2.Response(200, content=b"{}")

    fwd = _forwarder(Directory(B2), holder, require_tls=True)  # as with `mesh_cafile`
    refused = await fwd.forward("h", _request(), BODY, 1)
    assert isinstance(refused, Refusal) and refused.details == {"reason": "holder_unreachable"}
    assert seen == []
    secure = _forwarder(
        Directory(Holder("b-2", 7, "https://b2.internal:8782")), holder, require_tls=True
    )
    assert isinstance(await secure.forward("h", _request(), BODY, 1), HttpResponse)
    (sent,) = seen
    headers = {k: sent.headers.get_list(k) for k in sent.headers}
    covered = signing.Checker(KEY, "b-2").check("POST", "/mcp", headers, BODY, NOW).headers
    # and the token's digest, and the time left for the call (its deadline, covered too)
    assert covered == {"content-type": ["application/json"], "ftw-budget-ms": ["999999999"]}


async def test_with_tls_required_an_agent_request_is_never_relayed_in_clear() -> None:
    from ftwbridge.door import HomeOffline
    from ftwbridge.mesh.relay import BoxRelay
    from ftwbridge.proto.envelope import Envelope

    seen: list[httpx2.Request] = []

    def holder(request: httpx2.Request) -> httpx2.Response:
        seen.append(request)
        return httpx2.Response(200, content=b"{}")

    async def send_here(home: str, env: Envelope) -> None:
        raise AssertionError("not here")

    relay = BoxRelay(
        directory=Directory(B2),
        here=lambda home: False,
        send_here=send_here,
        hop=MockHop(holder),
        key=KEY,
        wall_ms=lambda: NOW,
        require_tls=True,
    )
    with pytest.raises(HomeOffline):
        await relay.send("h", Envelope("agent.request", None, {"req": "r1"}))
    assert seen == []


async def test_a_holder_that_never_answers_ends_the_call_by_its_deadline(
    autojump_clock: trio.abc.Clock,
) -> None:
    """A holder stopped (SIGSTOP) or frozen takes the request and says nothing: the forward
    ends at the call's `work_ends`, counted from the call's start, not from its send (and not
    at the HTTP client's read timeout); the holder was told the time left, less the hop."""
    sent: list[httpx2.Request] = []

    async def frozen(request: httpx2.Request) -> httpx2.Response:
        sent.append(request)
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    fwd = _forwarder(Directory(B2), frozen)
    start = trio.current_time()
    req = replace(_request(), work_ends=start + 24.5)
    ended = await fwd.forward("h", req, BODY, 1)
    assert ended == Refusal("E_UNAVAILABLE", {"reason": "holder_late"})
    assert trio.current_time() - start == pytest.approx(24.5)
    (one,) = sent  # never sent again
    assert one.headers["ftw-budget-ms"] == "24000"
    assert fwd.stats.late == 1
    # a lookup that does not come back by then is not a send: unreachable, not late
    fwd = _forwarder(SlowDirectory(), frozen)
    req = replace(_request(), work_ends=trio.current_time() + 3)
    ended = await fwd.forward("h", req, BODY, 1)
    assert ended == Refusal("E_UNAVAILABLE", {"reason": "holder_unreachable"})
    assert len(sent) == 1


class SlowDirectory(Directory):
    """A directory whose lookup never comes back (PostgreSQL stalled)."""

    async def holder(self, home: str) -> Holder | None:
        await trio.sleep_forever()
        raise AssertionError("unreachable")


async def test_a_relayed_agent_request_forgets_a_holder_that_moved_or_is_not_reached() -> None:
    from ftwbridge.mesh.relay import BoxRelay
    from ftwbridge.proto.envelope import Envelope

    answers = iter([httpx2.Response(421, headers={"ftw-mesh-moved": "1"}), httpx2.Response(204)])

    def holder(request: httpx2.Request) -> httpx2.Response:
        return next(answers)

    async def send_here(home: str, env: Envelope) -> None:
        raise AssertionError("not here")

    directory = Directory(B2, B3)
    relay = BoxRelay(
        directory=directory,
        here=lambda home: False,
        send_here=send_here,
        hop=MockHop(holder),
        key=KEY,
        wall_ms=lambda: NOW,
    )
    await relay.send("h", Envelope("agent.request", None, {"req": "r1"}))
    assert directory.forgotten == [("h", B2, False)] and directory.lookups == 2
