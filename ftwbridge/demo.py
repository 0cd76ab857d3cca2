"""`ftwbridge demo`: a home, the bridge, and an assistant reading it, in one process tree.

Starts the bridge (keys part in-process, SQLite in a state folder), starts a stub home in its
own process (`python -m stubbox`), enrolls the home, has the keys part create a demo agent key,
asks the home's owner console to grant it (the box signs a roster listing the agent), mints a
token, then runs the official `mcp` client in the 2026-07-28 and legacy eras: it lists the
tools, calls every read (with this month's energy against last month's and advice on charging
the car to 90 % by the home's morning), lists the home's resources, reads `live`, gets a
prompt, and prints what it read; in the 2026-07-28 era it then starts a charge
(the person confirms), stops it, and asks the owner for a charge target, which the owner
approves at the home's console. Without `--once` it then keeps serving and prints the URL and
token for MCP Inspector or another client.
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trio

from ftwbridge.config import Config
from ftwbridge.lifecycle import until_signalled
from ftwbridge.mcp import apps
from ftwbridge.proto.registry import READ_SCOPES
from ftwbridge.run import Bridge

DEMO_HOME = "demo-home"
WAIT_S = 60.0
"""The most the demo waits for its stub home's roster to reach the bridge, seconds: about a
second on an idle machine, but the demo must not fail on a loaded one."""
DEMO_CALLS: list[tuple[str, dict[str, Any]]] = [
    ("homes_list", {}),
    ("status", {}),
    ("chargers_list", {}),
    ("cars_list", {}),
    ("plan_get", {"hours": 6}),
    ("plan_explain", {"hours": 6}),
    ("history_query", {"range": "24h", "series": ["pv_w", "load_w"], "points": 24}),
    ("health_get", {}),
    ("events_list", {"limit": 3}),
    ("logs_tail", {"lines": 3, "level": "warn"}),
    ("drivers_status", {}),
    ("config_get", {"section": "battery"}),
    ("diag_run", {"check": "clock"}),
]


async def console(port: int, command: dict[str, Any]) -> Any:
    """Send one command to a stub home's owner console; returns its `ok` value.

    Raises:
        RuntimeError: the console answered with an error.
    """
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(json.dumps(command).encode() + b"\n")
        buf = b""
        while not buf.endswith(b"\n"):
            chunk = await stream.receive_some(65536)
            if not chunk:
                break
            buf += chunk
    answer = json.loads(buf)
    if "error" in answer:
        raise RuntimeError(answer["error"])
    return answer["ok"]


async def start_stub(
    nursery: trio.Nursery,
    door_url: str,
    *extra: str,
    home: str = DEMO_HOME,
    prefix: tuple[str, ...] = (),
) -> tuple[trio.Process, dict[str, Any]]:
    """Start `python -m stubbox` for `home` (`prefix` goes before it, e.g. `taskset -c 1`);
    returns (process, its start line).

    The stub is owned twice over: cancelling `nursery` stops it, and it watches a pipe on its
    standard input (`--exit-with-parent`), so it also exits when this process dies uncleanly.
    """
    argv = [*prefix, sys.executable, "-m", "stubbox", "--bridge", door_url]
    argv += ["--home", home, "--seed", home, "--exit-with-parent", *extra]
    proc: trio.Process = await nursery.start(
        functools.partial(
            trio.run_process, argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, check=False
        )
    )
    assert proc.stdout is not None
    buf = b""
    while b"\n" not in buf:
        chunk = await proc.stdout.receive_some(4096)
        if not chunk:
            raise RuntimeError("the stub home exited before it started")
        buf += chunk
    return proc, json.loads(buf.split(b"\n", 1)[0])


async def grant_agent(
    bridge: Bridge,
    console_port: int,
    home: str,
    *,
    scopes: list[str] | None = None,
    ttl_ms: int = 86_400_000,
    name: str = "Demo assistant",
    ops: list[str] | None = None,
    caps: dict[str, int] | None = None,
) -> tuple[bytes, str]:
    """Create an agent key in the keys part, have the owner grant it (`scopes`, reads by
    default; `ops` and `caps`, none by default), wait for the roster.

    Returns (agent key, agent id).
    """
    key = await bridge.keys.create(home)
    agent_id = "agent-" + key[:4].hex()
    granted = sorted(s.value for s in READ_SCOPES) if scopes is None else scopes
    await console(
        console_port,
        {
            "op": "put_agent",
            "home": home,
            "key": key.hex(),
            "id": agent_id,
            "client": "demo",
            "name": name,
            "scopes": granted,
            "ops": ops or [],
            "caps": caps or {},
            "expiresAtMs": bridge.clock() + ttl_ms,
        },
    )
    with trio.fail_after(WAIT_S):
        await bridge.door.wait_roster(home, lambda r: key in r.agents())
    return key, agent_id


def _summary(name: str, data: Any) -> str:
    text = json.dumps(data, ensure_ascii=False)
    return f"  {name:15} {text[:150]}{'…' if len(text) > 150 else ''}"


DEMO_REDIRECT = "http://127.0.0.1:9/callback"
"""Where the scripted assistant says it listens for the OAuth redirect (never contacted)."""


@dataclass(frozen=True, slots=True)
class Consent:
    """What the person saw and where the browser ended: the consent page (HTML and headers)
    and the redirect to the client (its URL and query)."""

    page: str
    page_headers: dict[str, str]
    location: str
    query: dict[str, list[str]]


async def consent_as_person(
    base_url: str, authorize_url: str, console_port: int, home: str
) -> Consent:
    """Play the person at the browser: open the consent page, type the code the home shows,
    and follow the waiting page while the owner approves at home.

    Raises:
        RuntimeError: any step answered other than the flow says (page 200, post 303, waiting
            page 200 that reloads itself, then 303 to the client).
    """
    import re
    from urllib.parse import parse_qs, urlsplit

    import httpx2

    async with httpx2.AsyncClient(follow_redirects=False, timeout=20) as http:
        page = await http.get(authorize_url)
        req = re.search(r'name="req" value="([^"]+)"', page.text)
        csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
        if page.status_code != 200 or req is None or csrf is None:
            raise RuntimeError(
                f"the consent page did not open: {page.status_code} {page.text[:200]}"
            )
        code = (await console(console_port, {"op": "claim", "home": home}))["code"]
        print(
            f"  the home shows claim code {code}; the person types it; the owner approves at home"
        )
        r = await http.post(
            base_url + "/authorize", data={"req": req.group(1), "csrf": csrf.group(1), "code": code}
        )
        if r.status_code != 303:
            raise RuntimeError(f"the claim was not taken: {r.status_code} {r.text[:200]}")
        wait_url = base_url + r.headers["location"]
        with trio.fail_after(WAIT_S):
            while True:
                r = await http.get(wait_url)
                if r.status_code == 303:
                    break
                if r.status_code != 200 or 'http-equiv="refresh"' not in r.text:
                    raise RuntimeError(f"the waiting page broke: {r.status_code} {r.text[:200]}")
                await trio.sleep(0.1)  # the page reloads itself every 2 s; a script is quicker
        location = r.headers["location"]
        return Consent(page.text, dict(page.headers), location, parse_qs(urlsplit(location).query))


class MemoryTokenStorage:
    """The `mcp` client's token storage, kept in memory (the demo's and the tests' assistant)."""

    def __init__(self) -> None:
        self.tokens: Any = None
        self.client: Any = None

    async def get_tokens(self) -> Any:
        return self.tokens

    async def set_tokens(self, tokens: Any) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> Any:
        return self.client

    async def set_client_info(self, client_info: Any) -> None:
        self.client = client_info


async def oauth_sign_in(base_url: str, mcp_url: str, console_port: int, home: str) -> Any:
    """The official `mcp` client's OAuth provider, signing in through the bridge with the person
    played by `consent_as_person`. Returns the provider (an httpx2 auth); once it signed in,
    `demo_storage` holds its tokens and `demo_consents` what the person saw."""
    from mcp.client.auth import OAuthClientProvider
    from mcp.shared.auth import (
        AuthorizationCodeResult,
        OAuthClientMetadata,
    )
    from pydantic import AnyUrl

    answer: dict[str, list[str]] = {}
    consents: list[Consent] = []

    async def redirect_handler(url: str) -> None:
        consents.append(await consent_as_person(base_url, url, console_port, home))
        answer.update(consents[-1].query)

    async def callback_handler() -> AuthorizationCodeResult:
        return AuthorizationCodeResult(
            code=answer["code"][0], state=answer["state"][0], iss=answer.get("iss", [None])[0]
        )

    meta = OAuthClientMetadata(
        redirect_uris=[AnyUrl(DEMO_REDIRECT)],
        client_name="Demo assistant",
        grant_types=["authorization_code", "refresh_token"],
        response_types=["code"],
        token_endpoint_auth_method="none",
    )
    storage = MemoryTokenStorage()
    provider = OAuthClientProvider(
        server_url=mcp_url,
        client_metadata=meta,
        storage=storage,
        redirect_handler=redirect_handler,
        callback_handler=callback_handler,
    )
    provider.demo_storage = storage  # type: ignore[attr-defined]
    provider.demo_consents = consents  # type: ignore[attr-defined]
    return provider


def energy_calls(home_now_ms: int) -> list[tuple[str, dict[str, Any]]]:
    """The demo's energy questions: this month against last (`energy_report`), and how to
    charge the car to 90 % by 12 hours after the home's `home_now_ms` (`charge_options`)."""
    return [
        ("energy_report", {"period": "month", "count": 2}),
        ("charge_options", {"ready_by": home_now_ms + 12 * 3_600_000, "target_percent": 90}),
    ]


async def _ask_energy(client: Any, home_now_ms: int) -> list[str]:
    lines = []
    for name, args in energy_calls(home_now_ms):
        result = await client.call_tool(name, args)
        data = result.structured_content
        if result.is_error or not isinstance(data, dict):
            lines.append(_summary(name, result.content[0].text))
            continue
        lines.append(f"  {name:15} {data.get('summary') or data.get('message')}")
        if name == "charge_options" and "advice" in data:
            lines.append(f"  {'':15} advice: {json.dumps(data['advice'])}")
    return lines


async def assistant_session(
    url: str, mode: str, *, token: str | None = None, auth: Any = None, home_offset_ms: int = 0
) -> list[str]:
    """Run the official `mcp` client in `mode` with a bearer token or an OAuth provider;
    returns one printed line per tool called. `home_offset_ms` is how far the home's clock
    runs ahead of ours (ms), for the charging question's `ready_by`."""
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    lines = []
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    http = httpx2.AsyncClient(headers=headers, auth=auth, timeout=httpx2.Timeout(30.0))
    async with http, Client(streamable_http_client(url, http_client=http), mode=mode) as client:
        tools = await client.list_tools()
        lines.append(f"[{mode}] protocol {client.protocol_version}: {len(tools.tools)} tools")
        for name, args in DEMO_CALLS:
            result = await client.call_tool(name, args)
            data = result.structured_content if not result.is_error else result.content[0].text  # type: ignore[union-attr]
            lines.append(_summary(name, data))
        lines += await _ask_energy(client, int(time.time() * 1000) + home_offset_ms)
        lines += await _resources_and_prompt(client)
    return lines


async def _resources_and_prompt(client: Any) -> list[str]:
    """The assistant lists the home's resources, reads `live`, and gets the `home_overview`
    prompt (docs/resources.md); one printed line each."""
    listed = await client.list_resources()
    names = ", ".join(r.name for r in listed.resources)
    live = next(r for r in listed.resources if r.name == "live")
    read = await client.read_resource(str(live.uri))
    prompt = await client.get_prompt("home_overview")
    text = prompt.messages[0].content.text
    return [
        f"  {'resources':15} {len(listed.resources)}: {names}",
        _summary("read live", json.loads(read.contents[0].text)),
        f"  {'prompt':15} home_overview: {len(prompt.messages)} messages, {text[:100]}…",
    ]


DEMO_HOME_HOUR = 19
"""The demo home's local hour (UTC): an evening, when its car is plugged in and its own
night charge (01:00-05:00) does not hold the charger, so the demo's charge means the same at
any hour it runs."""
DAY_MS = 86_400_000


async def control_session(url: str, auth: Any, console_port: int, home: str) -> list[str]:
    """The assistant's control in the 2026-07-28 era (docs/control.md): it starts a charge,
    which the person confirms when the bridge asks, reads the hold, stops it, and asks the
    owner for a charge target, which the demo home's owner approves at home (`--approve-all`;
    its console shows the decision). Returns the printed lines."""
    import httpx2
    from mcp import Client
    from mcp.client.session import ClientRequestContext
    from mcp.client.streamable_http import streamable_http_client
    from mcp_types import ElicitRequestParams, ElicitResult, ErrorData

    lines: list[str] = []

    async def person(
        context: ClientRequestContext, params: ElicitRequestParams
    ) -> ElicitResult | ErrorData:
        lines.append(f"  the bridge asks the person: {params.message!r}; they confirm")
        return ElicitResult(action="accept", content={"confirm": True})

    http = httpx2.AsyncClient(auth=auth, timeout=httpx2.Timeout(30.0))
    client = Client(
        streamable_http_client(url, http_client=http),
        mode="2026-07-28",
        elicitation_callback=person,
    )
    async with http, client:

        async def show(label: str, name: str, args: dict[str, Any]) -> Any:
            result = await client.call_tool(name, args)
            data = result.structured_content if not result.is_error else result.content[0].text  # type: ignore[union-attr]
            lines.append(_summary(label, data))
            return data

        lines.append("[2026-07-28] the assistant takes control within the owner's grant:")
        await show("ev_charge_now", "ev_charge_now", {"charger": "lp1", "power_w": 7400})
        held = await show("  hold now", "chargers_list", {})
        lines[-1] = _summary("hold now", held["loadpoints"][0] if isinstance(held, dict) else held)
        await show("ev_stop", "ev_stop", {"charger": "lp1"})
        by_ms = int(time.time() * 1000) + DAY_MS
        asked = await show(
            "goal_request",
            "goal_request",
            {
                "goal": "ev_target",
                "car": "car1",
                "soc_permille": 900,
                "by_ms": by_ms,
                "note": "trip",
            },
        )
        if isinstance(asked, dict):  # this home's owner approves all (--approve-all)
            waiting = await console(console_port, {"op": "requests", "home": home, "all": True})
            decided = [w for w in waiting if w.get("reqId") == asked["reqId"]]
            state = decided[0].get("state") if decided else "unknown"
            lines.append(f"  the owner decides at home (the demo home approves all): {state}")
        await show("requests_list", "requests_list", {})
    return lines


async def listen_session(url: str, auth: Any, updates: int = 2) -> list[str]:
    """The assistant listens to the home's `live` resource (`subscriptions/listen`, 2026-07-28,
    docs/live.md) until `updates` updates came, reading it after each: the stream comes from the
    box's telemetry, so the reads are answered from the live feed, not the box. Returns the
    printed lines."""
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    lines: list[str] = []
    http = httpx2.AsyncClient(auth=auth, timeout=httpx2.Timeout(30.0))
    async with http, Client(streamable_http_client(url, http_client=http), mode="2026-07-28") as c:
        listed = await c.list_resources()
        live = str(next(r for r in listed.resources if r.name == "live").uri)
        lines.append(f"[2026-07-28] the assistant listens to {live}:")
        async with c.listen(resource_subscriptions=[live]) as sub:
            async for _event in sub:
                read = await c.read_resource(live)
                lines.append(_summary("updated", json.loads(read.contents[0].text)))  # type: ignore[union-attr]
                if len(lines) > updates:
                    break
    return lines


async def run_demo(*, once: bool, port: int, state_dir: Path | None) -> int:
    """The demo (see the module docstring); returns the exit status."""
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="ftwbridge-demo-") as tmp:
        state = state_dir or Path(tmp)
        # The scripted session makes 48 requests of one home at once and some 50 requests to
        # /mcp as one agent: larger pacing and HTTP bursts let it run without waiting. The
        # home's clock is set to its evening (DEMO_HOME_HOUR), so the bridge takes a day's
        # skew; every other limit keeps its default.
        config = Config(
            bind=f"127.0.0.1:{port}",
            public_url=f"http://127.0.0.1:{port}",
            state_dir=state,
            admin_bind="127.0.0.1:0",
            pace_calls_burst=60,
            http_burst=60,
            clock_skew_max_ms=DAY_MS,
            listen_min_interval_s=1.0,  # the listen's two updates come in two seconds
        )
        bridge = Bridge(config)

        async def run(nursery: trio.Nursery) -> None:
            await nursery.start(bridge.serve)
            url = bridge.site.resource
            door_url = url.replace("http://", "ws://").removesuffix("/mcp") + "/v1/box"
            stub_state = ("--state", str(state / "stub"))  # its roster lives as the bridge's
            _proc, line = await start_stub(nursery, door_url, "--approve-all", *stub_state)
            await bridge.store.enroll_home(DEMO_HOME, bytes.fromhex(line["homeKey"]))
            now = int(time.time() * 1000)
            evening = (DEMO_HOME_HOUR * 3_600_000 - now % DAY_MS) % DAY_MS
            await console(line["console"], {"op": "clock", "home": DEMO_HOME, "offsetMs": evening})
            with trio.fail_after(WAIT_S):
                await bridge.door.wait_roster(DEMO_HOME, lambda r: True)
            print(f"bridge at {url}; home {DEMO_HOME} online; an assistant signs in (OAuth):")
            base = bridge.site.public_url.rstrip("/")
            auth = await oauth_sign_in(base, url, line["console"], DEMO_HOME)
            lines = await assistant_session(url, "2026-07-28", auth=auth, home_offset_ms=evening)
            lines += await control_session(url, auth, line["console"], DEMO_HOME)
            lines += await listen_session(url, auth)
            token = auth.demo_storage.tokens.access_token
            lines += await assistant_session(url, "legacy", token=token, home_offset_ms=evening)
            for text in lines:
                print(text, flush=True)
            print(f"demo session done in {time.monotonic() - started:.1f} s")
            print("\n".join(apps.demo_lines()), flush=True)
            if once:
                return  # cancelling the nursery stops the bridge and the stub home's process
            code = (await console(line["console"], {"op": "claim", "home": DEMO_HOME}))["code"]
            print("\nConnect another MCP client (Streamable HTTP):")
            print(f"  URL:    {url}")
            print(
                f"  with OAuth: sign in and type the home's claim code {code} (one use, 10 minutes;"
            )
            print("    the demo home approves every assistant at once; its console's")
            print('    {"op": "claim"} shows a new code)')
            print(f"  or a header: Authorization: Bearer {token}")
            print(f"  owner console of the home: 127.0.0.1:{line['console']} (JSON lines)")
            print(f"  metrics: {bridge.admin_url}/metrics")
            print("Ctrl-C stops the demo.", flush=True)
            await trio.sleep_forever()

        await until_signalled(run)
    return 0
