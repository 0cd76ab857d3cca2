"""MCP Inspector's `mcpdo` (its connection CLI: a daemon holds the connection, each command is
one process) against a live bridge over Streamable HTTP with a bearer header.

Each test runs its own private, token-gated daemon (`mcpdo private`: a directory of its own
under /tmp, since the daemon's Unix socket path must stay short) and stops it when the test
ends, failed or not (`mcpdo daemon stop`, then the daemon's pid is killed if it is still there).
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.e2e.env import Env
from tests.peers.test_peers import NODE_BIN, PEERS, node_env, run

MCPDO = str(NODE_BIN / "mcpdo")
LIVE = "ftw://home/h1/live"
STREAM_WAIT_S = 120
"""How long the stream may take to bring its first update, and to close (generous for a
loaded 2-core machine, where the daemon alone takes seconds to start)."""


def mcpdo_json(*argv: str) -> list[str]:
    """The argv of one mcpdo command that prints JSON."""
    return [MCPDO, "--format", "json", *argv]


def private_daemon(out: str) -> dict[str, str]:
    """The variables `mcpdo private` prints as `export NAME='value'` lines."""
    found: dict[str, str] = {}
    for line in out.splitlines():
        name, _, value = line.removeprefix("export ").partition("=")
        found[name] = shlex.split(value)[0]
    assert set(found) == {"MCP_INSPECTOR_DAEMON_DIR", "MCP_INSPECTOR_DAEMON_TOKEN"}, out
    return found


async def stop_daemon(denv: dict[str, str]) -> None:
    """Stops the private daemon of `denv` (`daemon stop`), waits up to 15 s for its pid (from
    `daemon status`) to exit and kills it if it has not; removes the daemon's directory."""
    try:
        with trio.move_on_after(60):
            code, out, _err = await run(mcpdo_json("daemon", "status"), denv)
            pid = json.loads(out).get("pid") if code == 0 else None
            if isinstance(pid, int):  # else it is not running (or never started)
                with contextlib.suppress(ProcessLookupError):
                    exited = os.pidfd_open(pid)  # readable once the process has exited
                    try:
                        await run(mcpdo_json("daemon", "stop"), denv)
                        with trio.move_on_after(15) as waited:
                            await trio.lowlevel.wait_readable(exited)
                        if waited.cancelled_caught:
                            signal.pidfd_send_signal(exited, signal.SIGKILL)
                    finally:
                        os.close(exited)
    finally:
        shutil.rmtree(denv["MCP_INSPECTOR_DAEMON_DIR"], ignore_errors=True)


@pytest.fixture
async def mcpdo(env: Env, tmp_path: Path) -> AsyncIterator[tuple[Env, dict[str, str]]]:
    """A stub home `h1`, its agent's token, and an `mcpdo` daemon of this test's own connected
    to the bridge as `@bridge` (2026-07-28, the bearer header); the daemon stops at the end."""
    home = await env.add_home("h1")
    _key, _agent, token = await env.agent(home)
    nenv = node_env(tmp_path)
    code, out, err = await run([MCPDO, "private"], nenv)
    assert code == 0, err[-2000:]
    catalog = tmp_path / "mcp.json"
    entry = {"type": "http", "url": env.url, "protocolEra": "modern"}
    entry["headers"] = {"Authorization": f"Bearer {token}"}
    catalog.write_text(json.dumps({"mcpServers": {"bridge": entry}}))
    denv = nenv | private_daemon(out) | {"MCP_CATALOG_PATH": str(catalog)}
    try:
        code, out, err = await run([*mcpdo_json("connect", "bridge")], denv)
        assert code == 0, (out + err)[-2000:]
        assert json.loads(out)["protocolEra"] == "modern", out
        yield env, denv
    finally:
        with trio.CancelScope(shield=True):
            await stop_daemon(denv)


def json_values(text: str) -> list[Any]:
    """The JSON values `text` holds one after another (mcpdo writes a stream's events as
    pretty-printed JSON, one value after another)."""
    decoder, values, at = json.JSONDecoder(), [], 0
    while text[at:].strip():
        at += len(text[at:]) - len(text[at:].lstrip())
        value, at = decoder.raw_decode(text, at)
        values.append(value)
    return values


async def test_mcpdo_lists_reads_and_gets_a_prompt(mcpdo: tuple[Env, dict[str, str]]) -> None:
    _env, denv = mcpdo

    async def call(*argv: str) -> Any:
        code, out, err = await run(mcpdo_json("@bridge", *argv), denv)
        assert code == 0, (out + err)[-2000:]
        return json.loads(out)

    listed = await call("resources/list")
    uris = [r["uri"] for r in listed["resources"]]
    assert uris[0] == LIVE and "ftw://home/h1/grant" in uris
    templates = await call("resources/templates/list")
    shapes = [t["uriTemplate"] for t in templates["resourceTemplates"]]
    assert "ftw://home/h1/history/{range}{?series,points}" in shapes
    read = await call("resources/read", LIVE)
    assert read["cacheScope"] == "private" and read["contents"][0]["uri"] == LIVE
    assert json.loads(read["contents"][0]["text"])["fields"]["grid_w"] is not None
    prompt = await call("prompts/get", "home_overview")
    text, *links = (m["content"] for m in prompt["messages"])
    assert text["type"] == "text" and "Show, don't act" in text["text"]
    assert {"type": "resource_link", "uri": LIVE}.items() <= links[0].items()


async def test_mcpdo_listens_to_live(mcpdo: tuple[Env, dict[str, str]]) -> None:
    """`resources/subscribe` on mcpdo's modern connection opens a `subscriptions/listen`
    stream at the bridge (the bridge serves no `resources/subscribe`), which brings updates of
    `live` from the feed without box reads; ending the command closes the stream."""
    env, denv = mcpdo
    seen, events = "", []
    async with trio.open_nursery() as nursery:
        argv = mcpdo_json("@bridge", "resources/subscribe", LIVE)
        start = partial(trio.run_process, argv, stdout=subprocess.PIPE, check=False)
        proc = await nursery.start(partial(start, env=denv, cwd=PEERS))
        with trio.fail_after(STREAM_WAIT_S):
            async for chunk in proc.stdout:
                seen += chunk.decode()
                with contextlib.suppress(json.JSONDecodeError):  # a value not whole yet
                    events = json_values(seen)
                if len(events) >= 2:
                    break  # a new feed reference starts dirty: the first update comes at once
        assert env.bridge.listens.open_streams == 1
        nursery.cancel_scope.cancel()  # SIGTERM: how mcpdo's stream commands are ended
    assert len(events) >= 2, seen  # else the command ended first: its stderr is above
    assert events[0] == {"type": "subscribed", "uri": LIVE}
    assert events[1:] == [{"type": "resources/updated", "uri": LIVE}] * (len(events) - 1)
    assert env.bridge.listens.updates_sent >= 1 and env.bridge.pool.feeds.stats.box_reads == 0
    with trio.fail_after(STREAM_WAIT_S):
        await env.bridge.listens.wait_streams_at_most(0)  # the daemon closed its listen
