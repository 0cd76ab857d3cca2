"""Load at a set rate over real HTTP to `/mcp`: JSON-RPC `tools/call` with a tool mix, each
call by the next agent of a home picked at random, in both eras (2026-07-28 and 2025-11-25).

Every call ends as one `Call` with its outcome: `ok`; the registry code of a refusal in an
`isError` result (`E_UNAVAILABLE`, ...); `HTTP <status>` (401 for a revoked agent, 429);
`jsonrpc <code>`; `unreached` (the bridge was away on purpose and the call never got in);
`broken` (the connection failed under the call: a lost answer); `unsent` (the client refused
to send the request it was given, a fault of the soak's own: h11's `LocalProtocolError`);
`late` (no answer within the client's patience); `hung_up` (the soak hung up on purpose).
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass
from typing import Any

import httpx2
import trio

from devtools.sessions import DEMO_CALLS

from .fleet import Agent, Fleet

DEADLINE_SLACK_S = 2.0
"""What a call may take past the bridge's `call_deadline_s` (seconds): the deadline covers the
box reads; the token check, the body and the answer's trip come on top."""
KEEP_ALIVE_S = 2.0
"""How long the soak's clients keep an idle connection, seconds: under the bridge's 5 s."""
PATIENCE_S = 10.0
"""How much longer than deadline plus slack the client waits before it calls a call `late`."""
WEIGHTS = {"status": 4, "homes_list": 1, "history_query": 2, "plan_get": 2}
"""The tool mix: these weights, 1 for every other tool of `devtools.sessions.DEMO_CALLS`."""
META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
}
MODERN = {
    "content-type": "application/json",
    "accept": "application/json, text/event-stream",
    "mcp-protocol-version": "2026-07-28",
}
LEGACY = MODERN | {"mcp-protocol-version": "2025-11-25"}
LEGACY_SHARE = 0.2
"""Share of calls made in the 2025-11-25 era."""


@dataclass(slots=True)
class Call:
    """One call and how it ended (times in trio clock seconds)."""

    scenario: str
    home: str
    agent: str
    tool: str
    started: float
    took_s: float
    outcome: str
    words: str = ""
    """What the assistant read: the refusal's sentence, or the 401's description."""

    @property
    def answered(self) -> bool:
        """A result or a refusal came back (not unreached, broken, unsent, late or hung up)."""
        return self.outcome not in ("unreached", "broken", "unsent", "late", "hung_up")


def _body(tool: str, args: dict[str, Any], rid: int, modern: bool) -> dict[str, Any]:
    params: dict[str, Any] = {"name": tool, "arguments": args}
    if modern:
        params["_meta"] = META
    return {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params}


def _outcome(r: httpx2.Response) -> tuple[str, str]:
    if r.status_code != 200:
        challenge = r.headers.get("www-authenticate", "")
        found = re.search(r'error_description="([^"]*)"', challenge)
        try:
            message = str(r.json().get("error", {}).get("message", ""))
        except (ValueError, AttributeError):
            message = r.text[:200]
        return f"HTTP {r.status_code}", found.group(1) if found else message
    answer = r.json()
    if "error" in answer:
        return f"jsonrpc {answer['error'].get('code')}", str(answer["error"].get("message"))
    result = answer["result"]
    if not result.get("isError"):
        return "ok", ""
    error = result.get("_meta", {}).get("ftwbridge/error") or {}
    text = result["content"][0]["text"] if result.get("content") else ""
    return str(error.get("code", "tool_error")), str(error.get("message", text))


class Load:
    """Calls to one bridge at `rate_per_s`; every `Call` lands in `calls`.

    Args:
        url: the bridge's `/mcp`.
        fleet: homes and their agents (read at each call: revocations show at once).
        rate_per_s: calls started per second.
        deadline_s: the bridge's `call_deadline_s`.
        seed: the random mix's seed (a run can be repeated).
    """

    def __init__(
        self, url: str, fleet: Fleet, *, rate_per_s: float, deadline_s: float, seed: int
    ) -> None:
        self.url = url
        self.fleet = fleet
        self.rate_per_s = rate_per_s
        self.deadline_s = deadline_s
        self.rng = random.Random(seed)
        self.calls: list[Call] = []
        self.bridge_away = False
        """Set while the soak has stopped the bridge: a call that cannot get in is `unreached`."""
        self.tools = list(DEMO_CALLS)
        self._ids = 0

    def use_tools(self, listed: set[str]) -> None:
        """Keep only tools the bridge lists (`tools/list`)."""
        self.tools = [(name, args) for name, args in DEMO_CALLS if name in listed]

    def client(self) -> httpx2.AsyncClient:
        """An HTTP client for one stretch of load; closing it closes its connections."""
        # idle connections dropped well before the bridge's own idle close (`keep_alive_s`,
        # 5 s): a request sent on one as the bridge closes it gets no answer, a loss of the
        # client's making ("Keep-alive behind a proxy" in docs/operations.md)
        limits = httpx2.Limits(
            max_connections=200, max_keepalive_connections=32, keepalive_expiry=KEEP_ALIVE_S
        )
        return httpx2.AsyncClient(
            limits=limits,
            timeout=httpx2.Timeout(self.deadline_s + DEADLINE_SLACK_S + PATIENCE_S),
        )

    async def run(self, scenario: str, stop: trio.Event, homes: list[str]) -> None:
        """Start calls at the set rate to `homes` until `stop`, then wait for them all."""
        weights = [WEIGHTS.get(name, 1) for name, _ in self.tools]
        async with self.client() as http, trio.open_nursery() as nursery:
            begun = trio.current_time()
            n = 0
            while not stop.is_set():
                with trio.move_on_at(begun + n / self.rate_per_s):
                    await stop.wait()
                if stop.is_set():
                    break
                home = self.rng.choice(homes)
                tool, args = self.rng.choices(self.tools, weights)[0]
                agent = self.fleet.next_agent(home)
                nursery.start_soon(self.call, http, scenario, agent, tool, args)
                n += 1

    async def call(
        self,
        http: httpx2.AsyncClient,
        scenario: str,
        agent: Agent,
        tool: str,
        args: dict[str, Any],
        *,
        hang_up_s: float | None = None,
    ) -> Call:
        """One `tools/call` as `agent`; with `hang_up_s`, the client hangs up after that long
        (seconds) unless the answer came first."""
        self._ids += 1
        modern = self.rng.random() >= LEGACY_SHARE
        headers = (MODERN | {"mcp-method": "tools/call", "mcp-name": tool}) if modern else LEGACY
        headers = headers | {"authorization": f"Bearer {agent.token}"}
        body = json.dumps(_body(tool, args, self._ids, modern))
        started = trio.current_time()
        words = ""
        try:
            timeout = (
                httpx2.Timeout(hang_up_s) if hang_up_s is not None else httpx2.USE_CLIENT_DEFAULT
            )
            r = await http.post(self.url, content=body, headers=headers, timeout=timeout)
            outcome, words = _outcome(r)
        except httpx2.ConnectError:
            outcome = "unreached" if self.bridge_away else "broken"
        except httpx2.LocalProtocolError as exc:  # never sent: not the bridge's to answer
            outcome, words = "unsent", f"{type(exc).__name__}: {exc}"[:200]
        except httpx2.TimeoutException:
            outcome = "hung_up" if hang_up_s is not None else "late"
        except (httpx2.TransportError, ValueError, KeyError, TypeError) as exc:
            words = f"{type(exc).__name__}: {exc}"[:200]
            cut = "complete message body" in words  # an answer begun and cut: always a loss
            outcome = "unreached" if self.bridge_away and not cut else "broken"
        call = Call(
            scenario, agent.home, agent.id, tool, started, trio.current_time() - started, outcome
        )
        call.words = words
        self.calls.append(call)
        return call

    async def list_tools(self, agent: Agent) -> set[str]:
        """The tool names the bridge lists to `agent` (`tools/list`)."""
        body = {"jsonrpc": "2.0", "id": 0, "method": "tools/list", "params": {"_meta": META}}
        headers = MODERN | {"mcp-method": "tools/list", "authorization": f"Bearer {agent.token}"}
        async with self.client() as http:
            r = await http.post(self.url, content=json.dumps(body), headers=headers)
        r.raise_for_status()
        return {t["name"] for t in r.json()["result"]["tools"]}
