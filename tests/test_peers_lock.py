"""`peers/package-lock.json` is whole, so `make test`'s `npm ci` installs it and never rewrites it.

`npm ci` refuses a lock that lacks a package some locked package depends on, even an optional one
for another platform ("Missing: X from lock file"); `npm install` would add it and so change the
tracked file. npm finds a dependency `d` of the package at `node_modules/a/node_modules/b` in
`node_modules/a/node_modules/b/node_modules/d`, then in each folder above it
(`node_modules/a/node_modules/d`, `node_modules/d`): the lock must hold one of those.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

LOCK = Path(__file__).resolve().parent.parent / "peers" / "package-lock.json"
PACKAGE = LOCK.with_name("package.json")


def _wanted(entry: dict[str, Any]) -> set[str]:
    """The names a locked package needs installed: its dependencies, optional dependencies and
    the peer dependencies not marked optional (npm 7 and later install peers)."""
    optional_peers = {
        n for n, m in entry.get("peerDependenciesMeta", {}).items() if m.get("optional")
    }
    peers = set(entry.get("peerDependencies", {})) - optional_peers
    return set(entry.get("dependencies", {})) | set(entry.get("optionalDependencies", {})) | peers


def _resolves(packages: dict[str, Any], at: str, name: str) -> bool:
    base = at
    while True:
        if f"{base}/node_modules/{name}".lstrip("/") in packages:
            return True
        if not base:
            return False
        cut = base.rfind("/node_modules/")
        base = base[:cut] if cut >= 0 else ""


def test_every_dependency_of_every_locked_package_is_in_the_lock() -> None:
    packages: dict[str, Any] = json.loads(LOCK.read_text())["packages"]
    missing = sorted(
        f"{name} (needed by {at or 'package.json'})"
        for at, entry in packages.items()
        if not entry.get("link")
        for name in _wanted(entry)
        if not _resolves(packages, at, name)
    )
    assert not missing, missing


def test_the_lock_is_the_lock_of_package_json() -> None:
    declared = json.loads(PACKAGE.read_text())["dependencies"]
    root = json.loads(LOCK.read_text())["packages"][""]
    assert root["dependencies"] == declared
