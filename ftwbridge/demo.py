"""`ftwbridge demo`: a home, the bridge, and an assistant reading it, in one process tree.

Starts the bridge (keys part in-process, SQLite in a state folder), starts a stub home in its
own process (`python -m stubbox`), enrolls the home, has the keys part create a demo agent key,
asks the home's owner console to grant it (the box signs a roster listing the agent), mints a
token, then runs the official `mcp` client in the 2026-07-28 and legacy eras: it lists the
tools, calls every one, and prints what it read. Without `--once` it then keeps serving and
prints the URL and token for MCP Inspector or another client.
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

from ftwbridge.config import Config
from ftwbridge.lifecycle import until_signalled
from ftwbridge.proto.registry import READ_SCOPES
from ftwbridge.run import Bridge

DEMO_HOME = "demo-home"
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
    returns (process, its start line)."""
    argv = [*prefix, sys.executable, "-m", "stubbox", "--bridge", door_url]
    argv += ["--home", home, "--seed", home, *extra]
    proc: trio.Process = await nursery.start(
        functools.partial(trio.run_process, argv, stdout=subprocess.PIPE, check=False)
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
) -> tuple[bytes, str]:
    """Create an agent key in the keys part, have the owner grant it, wait for the roster.

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
            "ops": [],
            "caps": {},
            "expiresAtMs": bridge.clock() + ttl_ms,
        },
    )
    with trio.fail_after(10):
        await bridge.door.wait_roster(home, lambda r: key in r.agents())
    return key, agent_id


def _summary(name: str, data: Any) -> str:
    text = json.dumps(data, ensure_ascii=False)
    return f"  {name:15} {text[:150]}{'…' if len(text) > 150 else ''}"


async def assistant_session(url: str, token: str, mode: str) -> list[str]:
    """Run the official `mcp` client in `mode`; returns one printed line per tool called."""
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    lines = []
    http = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(30.0)
    )
    async with http, Client(streamable_http_client(url, http_client=http), mode=mode) as client:
        tools = await client.list_tools()
        lines.append(f"[{mode}] protocol {client.protocol_version}: {len(tools.tools)} tools")
        for name, args in DEMO_CALLS:
            result = await client.call_tool(name, args)
            data = result.structured_content if not result.is_error else result.content[0].text  # type: ignore[union-attr]
            lines.append(_summary(name, data))
    return lines


async def run_demo(*, once: bool, port: int, state_dir: Path | None) -> int:
    """The demo (see the module docstring); returns the exit status."""
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="ftwbridge-demo-") as tmp:
        state = state_dir or Path(tmp)
        # The scripted session makes 28 reads of one home at once; a larger pacing burst lets
        # it run without waiting (every other limit keeps its default).
        config = Config(
            bind=f"127.0.0.1:{port}",
            public_url=f"http://127.0.0.1:{port}",
            state_dir=state,
            admin_bind="127.0.0.1:0",
            pace_calls_burst=40,
        )
        bridge = Bridge(config)

        async def run(nursery: trio.Nursery) -> None:
            await nursery.start(bridge.serve)
            url = bridge.site.resource
            door_url = url.replace("http://", "ws://").removesuffix("/mcp") + "/v1/box"
            _proc, line = await start_stub(nursery, door_url)
            await bridge.store.enroll_home(DEMO_HOME, bytes.fromhex(line["homeKey"]))
            with trio.fail_after(15):
                await bridge.door.wait_roster(DEMO_HOME, lambda r: True)
            key, agent_id = await grant_agent(bridge, line["console"], DEMO_HOME)
            scopes = tuple(s.value for s in READ_SCOPES)
            token = await bridge.issue_token(DEMO_HOME, key, agent_id, scopes, client="demo")
            print(
                f"bridge at {url}; home {DEMO_HOME} online; agent {agent_id} granted by the home's owner"
            )
            for mode in ("2026-07-28", "legacy"):
                for text in await assistant_session(url, token, mode):
                    print(text, flush=True)
            print(f"demo session done in {time.monotonic() - started:.1f} s")
            if once:
                return  # cancelling the nursery stops the bridge and the stub home's process
            print("\nConnect another MCP client (Streamable HTTP):")
            print(f"  URL:    {url}")
            print(f"  header: Authorization: Bearer {token}")
            print(f"  owner console of the home: 127.0.0.1:{line['console']} (JSON lines)")
            print(f"  metrics: {bridge.admin_url}/metrics")
            print("Ctrl-C stops the demo.", flush=True)
            await trio.sleep_forever()

        await until_signalled(run)
    return 0
