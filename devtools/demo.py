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

import tempfile
import time
from pathlib import Path

import trio

from devtools.rig import DEMO_HOME, WAIT_S, console, start_stub
from devtools.sessions import DAY_MS, assistant_session, control_session, listen_session
from devtools.signin import oauth_sign_in
from ftwbridge.config import Config
from ftwbridge.lifecycle import until_signalled
from ftwbridge.mcp import apps
from ftwbridge.run import Bridge

DEMO_HOME_HOUR = 19
"""The demo home's local hour (UTC): an evening, when its car is plugged in and its own
night charge (01:00-05:00) does not hold the charger, so the demo's charge means the same at
any hour it runs."""


def _print_connect(
    url: str, code: str, token: str, console_port: int, admin_url: str | None
) -> None:
    """How another MCP client connects to the demo that keeps serving: the URL, the home's
    claim `code` for OAuth or the bearer `token`, the home's console and the metrics."""
    print("\nConnect another MCP client (Streamable HTTP):")
    print(f"  URL:    {url}")
    print(f"  with OAuth: sign in and type the home's claim code {code} (one use, 10 minutes;")
    print("    the demo home approves every assistant at once; its console's")
    print('    {"op": "claim"} shows a new code)')
    print(f"  or a header: Authorization: Bearer {token}")
    print(f"  owner console of the home: 127.0.0.1:{console_port} (JSON lines)")
    print(f"  metrics: {admin_url}/metrics")
    print("Ctrl-C stops the demo.", flush=True)


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
            door_bind="127.0.0.1:0",  # the home dials the door's own listener
            pace_calls_burst=60,
            http_burst=60,
            clock_skew_max_ms=DAY_MS,
            listen_min_interval_s=1.0,  # the listen's two updates come in two seconds
        )
        bridge = Bridge(config)

        async def run(nursery: trio.Nursery) -> None:
            await nursery.start(bridge.serve)
            url = bridge.site.resource
            door_url = bridge.door_url
            assert door_url is not None
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
            _print_connect(url, code, token, line["console"], bridge.admin_url)
            await trio.sleep_forever()

        await until_signalled(run)
    return 0
