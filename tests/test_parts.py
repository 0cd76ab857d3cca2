"""The keys part in both modes, the CLI, and the project's import rules (the store: tests/store)."""

from __future__ import annotations

import ast
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from ftwbridge.keys import KeysClient, KeysPort, KeysService, serve_keys
from ftwbridge.keys.service import KeysError
from ftwbridge.proto.noise import Responder, generate_static
from tests.e2e.env import TOOL_NAMES

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("mode", ["in-process", "socket"])
async def test_keys_part(mode: str, tmp_path: Path, nursery: trio.Nursery) -> None:
    service = KeysService(tmp_path / "keys.json")
    port: KeysPort = service
    if mode == "socket":
        sock = tmp_path / "keys.sock"
        await nursery.start(serve_keys, sock, service)
        assert stat.S_IMODE(sock.stat().st_mode) == 0o600
        port = KeysClient(sock)
    box_private, box_public = generate_static()
    key = await port.create("h1")
    assert stat.S_IMODE((tmp_path / "keys.json").stat().st_mode) == 0o600
    assert await port.has(key)
    handle, m1 = await port.begin(key, box_public)
    responder = Responder(our_static=box_private)
    their, _ = responder.read_message1(m1)
    assert their == key
    m2, box_keys = responder.write_message2()
    keys = await port.finish(handle, m2)
    assert keys.send_key == box_keys.recv_key and keys.handshake_hash == box_keys.handshake_hash
    with pytest.raises(KeysError):
        await port.finish(handle, m2)  # a handshake is used once
    handle, _ = await port.begin(key, box_public)
    await port.abort(handle)
    assert service.pending_handshakes == 0
    # a key not yet listed stays (consent pending); once listed and then dropped, it goes
    assert await port.sync("h1", frozenset()) == []
    assert await port.sync("h1", frozenset({key})) == []
    assert await port.sync("h1", frozenset()) == [key]
    assert not await port.has(key)
    assert KeysService(tmp_path / "keys.json")._keys == {}  # forgotten at rest too


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """Every module `path` imports at run time, relative imports resolved to absolute names
    (`from . import x` counts as both the package and `package.x`); imports under
    `if TYPE_CHECKING:` are left out, as they never run."""
    tree = ast.parse(path.read_text())
    package = _module(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    out: set[str] = set()
    typing_only: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            typing_only.update(id(n) for n in ast.walk(node))
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package[: len(package) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            out.add(base)
            out.update(f"{base}.{a.name}" for a in node.names)
    return out


def _ours() -> dict[str, set[str]]:
    """Our modules (ftwbridge, stubbox) -> the modules of ours each imports."""
    paths = [*(ROOT / "ftwbridge").rglob("*.py"), *(ROOT / "stubbox").rglob("*.py")]
    modules = {_module(p): p for p in paths}
    return {n: {i for i in _imports(p) if i in modules and i != n} for n, p in modules.items()}


def test_relative_imports_resolve() -> None:
    proto = ROOT / "ftwbridge" / "proto"
    assert "ftwbridge.proto.envelope" in _imports(proto / "door.py")
    assert "ftwbridge.door.tunnel" in _imports(ROOT / "ftwbridge/door/door.py")
    assert "stubbox.reads" in _imports(ROOT / "stubbox" / "box.py")


def test_import_rules() -> None:
    stdlib = set(sys.stdlib_module_names)
    allowed = stdlib | {"cbor2", "nacl", "noise", "cryptography", "yaml", "ftwbridge"}
    for path in (ROOT / "ftwbridge" / "proto").glob("*.py"):
        for name in _imports(path):
            top = name.split(".")[0]
            assert top in allowed, (path, name)
            assert not name.startswith("ftwbridge.") or name.startswith("ftwbridge.proto"), (
                path,
                name,
            )  # proto keeps to itself
            assert top not in {"trio", "quart", "hypercorn", "pydantic", "time", "os"} or (
                path.name,
                top,
            ) == ("noise.py", "os"), (path, name)
    for part in ("keys", "door", "pool"):
        for path in (ROOT / "ftwbridge" / part).glob("*.py"):
            assert not any(
                n.startswith(("ftwbridge.mcp", "ftwbridge.oauth")) for n in _imports(path)
            ), path
    for path in (ROOT / "ftwbridge").rglob("*.py"):
        assert not any(n.startswith("stubbox") for n in _imports(path)), path


def test_no_import_cycles() -> None:
    """No module of ours reaches itself through its imports (a package's `__init__` counts as
    importing what it re-exports, its modules as importing nothing of the package)."""
    graph = _ours()
    for name, deps in graph.items():
        pkg = name.rsplit(".", 1)[0]
        graph[name] = {d for d in deps if d != pkg}  # a module needs its package started
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        path.append(node)
        for dep in sorted(graph[node]):
            if state.get(dep) == 1:
                cycle = [*path[path.index(dep) :], dep]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if dep not in state:
                visit(dep)
        path.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)


def test_cli_demo_once_reads_every_tool(tmp_path: Path) -> None:
    env = os.environ | {"FTWBRIDGE_STATE_DIR": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, "-m", "ftwbridge", "demo", "--once"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    for name in TOOL_NAMES:
        lines = [line for line in out.stdout.splitlines() if line.strip().startswith(name + " ")]
        assert len(lines) == 2, name  # once per era
        assert not any("E_" in line[:40] for line in lines), lines
    for start in ("resources       6: live,", "read live       {", "prompt          home_overview"):
        lines = [line for line in out.stdout.splitlines() if line.strip().startswith(start)]
        assert len(lines) == 2, (start, out.stdout[-3000:])  # once per era
    control = {line.split()[0]: line for line in out.stdout.splitlines() if line.startswith("  ")}
    assert (
        '"state": "applied"' in control["ev_charge_now"]
        and '"state": "applied"' in control["ev_stop"]
    )
    assert "approves all): approved" in out.stdout and '"reqId"' in control["goal_request"]
    updated = [line for line in out.stdout.splitlines() if line.strip().startswith("updated ")]
    assert len(updated) == 2 and all('"fields"' in line for line in updated), out.stdout[-3000:]
