"""What a home view left open costs the home box: reads by type and telemetry frames.

Starts a bridge in this process and one stub home as its own process (as the tests do,
tests/e2e/env.py), bundles the MCP Apps test host (peers/apps_host, needs peers/node_modules),
and leaves the view open in headless Chromium (bench/drive_apps_open.py) for `--seconds`, then
tears it down. Before and after, it reads the stub's counts (console `status`: `reads`,
`readsBy`) and the bridge's feed counters (`ftwbridge_feed_updates_total`: telemetry frames its
live feeds applied; `ftwbridge_feed_box_reads_total`). Prints one JSON object: the view's
`tools/call`s by tool, the box's reads by type over the run, and the frames. docs/apps.md
("How it stays within the home's budget") keeps the figures of a ten-minute run.

    python bench/apps_view_cost.py [--seconds 600]

It takes `--seconds` of wall time plus about a minute; it is not part of `make test`.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=600.0, help="how long the view stays open (s)")
    return p.parse_args(argv)


def counts(bridge: Any, stub: dict[str, Any]) -> dict[str, Any]:
    stats = bridge.pool.feeds.stats
    return {
        "reads": stub["reads"],
        "readsBy": stub["readsBy"],
        "feedUpdates": stats.updates,
        "feedBoxReads": stats.box_reads,
    }


def moved(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    by = {k: n - before["readsBy"].get(k, 0) for k, n in after["readsBy"].items()}
    return {
        "reads": after["reads"] - before["reads"],
        "readsBy": {k: n for k, n in sorted(by.items()) if n},
        "feedUpdates": after["feedUpdates"] - before["feedUpdates"],
        "feedBoxReads": after["feedBoxReads"] - before["feedBoxReads"],
    }


async def measure(seconds: float, tmp: Path) -> dict[str, Any]:
    import trio

    from tests.browser.test_apps_view import PEERS, bundle_host
    from tests.e2e.env import start_env
    from tests.oauth.helpers import serve_tiny_http

    async with trio.open_nursery() as nursery:
        env = await start_env(nursery, tmp / "bridge")
        await bundle_host(tmp / "host.js")
        index = (PEERS / "apps_host" / "index.html").read_bytes()

        def answer(path: str) -> tuple[bytes, str]:
            if path == "/host.js":
                return (tmp / "host.js").read_bytes(), "text/javascript"
            return index, "text/html; charset=utf-8"

        host = f"http://127.0.0.1:{await serve_tiny_http(nursery, answer)}"
        env.bridge.site.allowed_origins.add(host)
        home = await env.add_home("h1")
        _, _, token = await env.agent(home)
        before = counts(env.bridge, await home.console(op="status"))
        cfg = {"host": host, "mcp": env.url, "token": token, "seconds": seconds}
        done = await trio.run_process(
            [sys.executable, str(ROOT / "bench" / "drive_apps_open.py"), json.dumps(cfg)],
            capture_stdout=True,
            check=True,
            cwd=ROOT,
        )
        seen = json.loads(done.stdout.decode().strip().splitlines()[-1])
        await trio.sleep(1)  # the last answers reach the stub's counts
        after = counts(env.bridge, await home.console(op="status"))
        nursery.cancel_scope.cancel()
    return seen | {"box": moved(before, after)}


def main(argv: list[str]) -> None:
    args = parse(argv)
    import trio

    sys.path.insert(0, str(ROOT))
    with tempfile.TemporaryDirectory() as tmp:
        print(json.dumps(trio.run(measure, args.seconds, Path(tmp))))


if __name__ == "__main__":
    main(sys.argv[1:])
