"""The sending side of forwarding (docs/architecture.md, "When the home's uplink is at
another instance"): a `/mcp` request whose token's home is held by another instance goes
there whole, signed, and its answer comes back as it was (the hop's HTTP: `mesh/hop.py`).

`Forwarder.forward` decides with the directory (in memory: `store/known.py`), sends over the
hop's own channel (`mesh/channel.py`: HTTP/1.1 on pooled connections), and keeps to these rules: at most one hop; after a 421
from the holder (it lost the home) or a holder that cannot be reached, one fresh lookup and
one more try within the call's deadline; a holder that fails after the request went out ends
the call at once (`E_UNAVAILABLE {reason: holder_lost}`), never sent twice. The whole forward
ends by the call's `work_ends` (`ftwbridge/mcp/deadline.py`), counted from the call's start
here: the holder is told what is left (`deadline.BUDGET`), and a holder that does not answer
by then (stopped, frozen, overloaded) ends the call in words (`holder_late`), never sent again.
`Forwarder.forward_stream` does the same for a `subscriptions/listen`, whose answer is a stream
relayed as it comes (docs/live.md, "Many instances").
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import trio

from ftwbridge.mcp import deadline, inbound
from ftwbridge.mcp.forwarding import MESH_MOVED
from ftwbridge.mcp.http import RATE_LIMITED_JSONRPC, HttpRequest, HttpResponse, Write
from ftwbridge.proto.names import Code
from ftwbridge.proto.pacing import TokenBucket
from ftwbridge.proto.refusal import Refusal
from ftwbridge.store import StoreError
from ftwbridge.store.directory import Holder, Holders

from . import signing
from .channel import HopClient, Lost, NotReached
from .hop import STREAM_READ_S, dumps, end_to_end, has_header, passed_on, token_digest

log = logging.getLogger("ftwbridge.mesh")

PATH = "/mcp"
"""The internal listener's one route."""
MOVED = MESH_MOVED
"""The header of a holder's 421: it no longer holds the home at the epoch the sender named."""
GUARD_FACTOR = 4
"""The entry's coarse guard per agent (the authenticated principal, never the address, which
behind a balancer is the balancer's): this many times the per-agent bucket."""
GUARD_ADDRESSES = 10_000
"""Agents the guard remembers at most (full buckets are forgotten first)."""


@dataclass(slots=True)
class ForwardStats:
    """Counters (they only grow): requests forwarded and answered, retried after a 421 or an
    unreachable holder, ended because the holder failed, refused by the entry's guard, ended
    by the call's deadline before the holder answered."""

    forwarded: int = 0
    moved: int = 0
    unreachable: int = 0
    holder_lost: int = 0
    guarded: int = 0
    late: int = 0


class Forwarder:
    """Forwards `/mcp` requests to their home's holder.

    Args:
        directory: who holds which home (`KnownHolders`: in memory, no query per call); told
            of each holder that answered 421 or was not reached.
        holds: async (home, epoch) -> whether this instance holds the home at that claim.
        here: home -> whether the home's uplink is connected to this instance now; such a
            call is answered here with no directory lookup (default: never).
        hop: the channel to other instances (`channel.HopClient`), owned by the caller.
        key: the 32-byte `mesh_key`.
        wall_ms: the wall clock, ms since the Unix epoch (the signature's time).
        http_burst, http_per_s: the per-agent limit; the coarse guard is `GUARD_FACTOR` times it.
        require_tls: forward only to `https://` holders (`mesh_cafile` is set): a holder whose
            URL is plain HTTP is not sent the request (its bearer token would cross in clear);
            the call ends `E_UNAVAILABLE {reason: holder_unreachable}`.
    """

    def __init__(
        self,
        *,
        directory: Holders,
        holds: Callable[[str, int], Awaitable[bool]],
        here: Callable[[str], bool] = lambda home: False,
        hop: HopClient,
        key: bytes,
        wall_ms: Callable[[], int],
        http_burst: float,
        http_per_s: float,
        require_tls: bool = False,
    ) -> None:
        self._directory = directory
        self._holds = holds
        self._here = here
        self._hop = hop
        self._key = key
        self._wall_ms = wall_ms
        self._guard_burst = http_burst * GUARD_FACTOR
        self._guard_per_s = http_per_s * GUARD_FACTOR
        self._guards: dict[str, TokenBucket] = {}
        self._require_tls = require_tls
        self.stats = ForwardStats()

    @property
    def instance_id(self) -> str:
        """This instance's id."""
        return self._directory.instance_id

    async def holds(self, home: str, epoch: int) -> bool:
        """Whether this instance holds `home` at the claim `epoch` (`MeshPort.holds`)."""
        return await self._holds(home, epoch)

    def _guard(self, remote: str, rid: str | int | None) -> HttpResponse | None:
        """The entry's coarse guard per agent (`remote` is the agent, `McpService` sets it):
        None to go on, else the 429, audited as `guarded`."""
        now = trio.current_time()
        bucket = self._guards.get(remote)
        if bucket is None:
            if len(self._guards) >= GUARD_ADDRESSES:
                self._guards = {
                    a: b for a, b in self._guards.items() if b.tokens(now) < self._guard_burst
                }
            bucket = self._guards[remote] = TokenBucket(self._guard_burst, self._guard_per_s)
        if bucket.try_take(now):
            return None
        self.stats.guarded += 1
        wait_s = max(1, math.ceil(bucket.wait_s(now)))
        rej = inbound.Rejection(429, RATE_LIMITED_JSONRPC, "Too many requests", rid)
        return HttpResponse(
            429,
            {"content-type": "application/json", "retry-after": str(wait_s)},
            dumps(rej.body()),
            outcome="guarded",
        )

    def _secure_enough(self, home: str, holder: Holder) -> bool:
        """Whether `holder` may be sent a call: always, unless TLS is required and its URL is
        not `https://` (then counted as unreachable, with a warning)."""
        if not self._require_tls or holder.url.startswith("https://"):
            return True
        self.stats.unreachable += 1
        log.warning(
            "forward of home %s: instance %s is at %s, not https: not sent (mesh_cafile is"
            " set, so calls never cross the hop in clear)",
            home,
            holder.instance,
            holder.url,
        )
        return False

    async def forward(
        self, home: str, req: HttpRequest, body: bytes, rid: str | int | None
    ) -> HttpResponse | Refusal | None:
        """Send `req` to the holder of `home`, if that is another instance, by the call's
        `req.work_ends` (trio time).

        Returns:
            None when this instance should answer it (the home's uplink is here, the
            directory names this instance or nobody, or the directory does not answer); the
            holder's answer; a 429 of the entry's guard; or a `Refusal` `E_UNAVAILABLE` when
            the holder failed (`holder_lost`: after the request went out;
            `holder_unreachable`: twice not reached, or moved twice, or not reached by
            `work_ends`; `holder_late`: sent, and no answer by `work_ends`).
        """
        sent: list[bool] = [False]
        with trio.move_on_at(req.work_ends):
            return await self._forward(home, req, body, rid, sent)
        reason = "holder_late" if sent[0] else "holder_unreachable"
        log.warning("forward of home %s: no answer by the call's deadline (%s)", home, reason)
        self.stats.late += 1
        return Refusal(Code.E_UNAVAILABLE, {"reason": reason})

    async def _forward(
        self, home: str, req: HttpRequest, body: bytes, rid: str | int | None, sent: list[bool]
    ) -> HttpResponse | Refusal | None:
        """`forward` without its deadline; `sent[0]` is set once a request went out."""
        if self._here(home):  # its uplink is here: no lookup, and none to wait for while
            return None  # PostgreSQL does not answer
        tries = 2
        while tries:
            tries -= 1
            try:
                holder = await self._directory.holder(home)
            except StoreError as exc:
                log.warning("forward of home %s: no lookup (%s); answered here", home, exc)
                return None
            if holder is None or holder.instance == self.instance_id or not holder.url:
                return None
            if not self._secure_enough(home, holder):
                return Refusal(Code.E_UNAVAILABLE, {"reason": "holder_unreachable"})
            if tries == 1:  # the guard counts each request once, at its first send
                guarded = self._guard(req.remote, rid)
                if guarded is not None:
                    return guarded
            answer = await self._send_once(home, holder, req, body, sent, again=tries > 0)
            if answer is not None:
                return answer
        return Refusal(Code.E_UNAVAILABLE, {"reason": "holder_unreachable"})

    async def _send_once(
        self,
        home: str,
        holder: Holder,
        req: HttpRequest,
        body: bytes,
        sent: list[bool],
        *,
        again: bool,
    ) -> HttpResponse | Refusal | None:
        """Send `req` to `holder` once, signed, with what is left of the call's time: the
        holder's answer, `holder_lost` when it failed after the request went out, or None
        when it was not reached or no longer holds the home (`again`: one more lookup follows).
        """
        budget = deadline.hop_budget_ms(req.work_ends, trio.current_time())
        headers = self._signed_headers(req, body, holder, budget)
        sent[0] = True
        try:
            resp = await self._hop.request(holder.url, req.method, PATH, headers, body)
        except NotReached as exc:
            self.stats.unreachable += 1
            self._directory.forget(home, holder, unreachable=True)
            log.warning(
                "forward of home %s: instance %s at %s not reached (%s)%s",
                home,
                holder.instance,
                holder.url,
                exc,
                "; looking it up again" if again else "",
            )
            return None
        except Lost as exc:  # sent, then the holder failed: never again
            self.stats.holder_lost += 1
            log.warning(
                "forward of home %s: instance %s failed while answering (%s); call ended",
                home,
                holder.instance,
                exc,
            )
            return Refusal(Code.E_UNAVAILABLE, {"reason": "holder_lost"})
        if resp.status == 421 and has_header(resp.headers, MOVED):
            self.stats.moved += 1
            self._directory.forget(home, holder)
            log.info(
                "forward of home %s: %s no longer holds it at epoch %d",
                home,
                holder.instance,
                holder.epoch,
            )
            return None
        self.stats.forwarded += 1
        return HttpResponse(resp.status, end_to_end(resp.headers), resp.body)

    def _signed_headers(
        self, req: HttpRequest, body: bytes, holder: Holder, budget_ms: int | None = None
    ) -> list[tuple[str, str]]:
        """`req`'s end-to-end headers (`_passed_on`: the bearer token's SHA-256 in its place)
        and the mesh signature for `holder` at its epoch, which covers every header the holder
        reads (`mesh/signing.py`)."""
        digest = token_digest(req.headers.get("authorization", []))
        headers = passed_on(req.headers, drop_authorization=digest is not None)
        if budget_ms is not None:  # the holder's time, covered like every header it reads
            headers.append((deadline.BUDGET, str(budget_ms)))
        signed = signing.sign(
            self._key,
            sender=self.instance_id,
            method=req.method,
            path=PATH,
            to=holder.instance,
            epoch=holder.epoch,
            body=body,
            now_ms=self._wall_ms(),
            headers=headers,  # every header the holder reads is covered
            token_digest=digest,  # the token's digest in its place: never the token
        )
        return headers + list(signed.items())

    async def forward_stream(
        self, home: str, req: HttpRequest, body: bytes, rid: str | int | None
    ) -> HttpResponse | None:
        """A `subscriptions/listen` whose home another instance holds, served from there by
        one forwarded stream (docs/live.md, "Many instances"): the holder's answer is relayed
        piece by piece as it comes, and the client's close closes the forwarded request.

        Returns:
            None to answer here (as `forward`), the entry's guard's 429, or a response whose
            `stream` relays the holder's. Not reached, or moved (421): a 503 in words, so the
            client listens again; a holder lost mid-stream ends the stream without a result.
        """
        if self._here(home):
            return None
        try:
            holder = await self._directory.holder(home)
        except StoreError as exc:
            log.warning("listen of home %s: no lookup (%s); answered here", home, exc)
            return None
        if holder is None or holder.instance == self.instance_id or not holder.url:
            return None
        guarded = self._guard(req.remote, rid)
        if guarded is not None:
            return guarded
        headers = self._signed_headers(req, body, holder)
        resp = HttpResponse(200)

        async def relay(write: Write) -> None:
            try:
                async with self._hop.stream(
                    holder.url, "POST", PATH, headers, body, read_s=STREAM_READ_S
                ) as r:
                    if r.status == 421 and has_header(r.headers, MOVED):
                        self._directory.forget(home, holder)
                        raise Lost("the holder no longer holds the home")
                    resp.status = r.status
                    resp.headers = end_to_end(r.headers)
                    async for chunk in r.chunks():
                        await write(chunk)
                self.stats.forwarded += 1
            except (NotReached, Lost) as exc:
                self.stats.holder_lost += 1
                if isinstance(exc, NotReached):
                    self._directory.forget(home, holder, unreachable=True)
                log.warning(
                    "listen of home %s at instance %s ended (%s)", home, holder.instance, exc
                )
                if resp.headers:
                    return  # mid-stream: no result, the client listens again
                resp.status, resp.headers = 503, {"content-type": "application/json"}
                words = "the instance that holds this home did not answer; listen again"
                rej = inbound.Rejection(503, -32603, words, rid)
                resp.headers["retry-after"] = "2"
                await write(dumps(rej.body()))

        resp.stream = relay
        return resp
