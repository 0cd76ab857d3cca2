"""The developer's rig stays beside the product: no module of `ftwbridge` imports `devtools`
at its top, and only the demo command reaches it, from inside the function that runs it, so
an operator's commands never load it (docs/architecture.md, "Where the code lives")."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _devtools_imports(tree: ast.AST) -> list[ast.stmt]:
    found: list[ast.stmt] = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Import)
            and any(a.name.split(".")[0] == "devtools" for a in node.names)
        ) or (isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "devtools"):
            found.append(node)
    return found


def test_only_the_demo_command_imports_the_rig() -> None:
    importers = {}
    for path in (ROOT / "ftwbridge").rglob("*.py"):
        tree = ast.parse(path.read_text())
        if _devtools_imports(tree):
            importers[path.relative_to(ROOT).as_posix()] = tree
    assert list(importers) == ["ftwbridge/cli.py"]
    tree = importers["ftwbridge/cli.py"]
    module_level = (ast.Import, ast.ImportFrom, ast.If, ast.Try)  # not inside a def
    top_level = [n for n in tree.body if isinstance(n, module_level) and _devtools_imports(n)]
    assert top_level == [], "cli.py imports devtools at its top"
    holders = [
        f.name
        for f in ast.walk(tree)
        if isinstance(f, ast.FunctionDef) and any(_devtools_imports(s) for s in f.body)
    ]
    assert holders == ["_jobs"]


def test_the_command_line_loads_without_the_rig() -> None:
    code = (
        "import sys, ftwbridge.cli; print(any(m.split('.')[0] == 'devtools' for m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "False", done.stderr
