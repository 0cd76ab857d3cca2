"""The house's figures, read from the source alone: room sizes, the layers and the import arrows
that run up them, and the import cycles (docs/architecture.md, "Layers").

`python -m devtools.house [ROOT]` prints them for a checkout at ROOT (default: this one), so
the same tool gives the figures before and after a change (`git worktree add` the old commit,
then point ROOT at it). `tests/test_house.py` holds the tree to them.

What is counted:

- A module's size is its line count; a function's is its `def` line to its last line
  (docstring included, decorators not), for every `def` of `ftwbridge/` and `stubbox/`,
  nested ones too.
- An import arrow is one module importing another of the product (`ftwbridge`, `stubbox`),
  at its top, inside a function, or under `TYPE_CHECKING`: each is a dependency a reader
  has to hold. `from package import name` points at `package.name` when that is a module,
  else at the package.
- An arrow runs up when the importer's layer (`LAYERS`) is lower than the imported module's.
- A cycle is a strongly connected set of more than one node, counted twice: over modules,
  and over rooms (a subpackage such as `ftwbridge.pool`, or a top-level module), where a
  ring of packages (`keys` importing `store` importing `keys`) shows even when no two
  modules import each other.
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("ftwbridge", "stubbox")
MODULE_LINES_MAX = 400
FUNCTION_LINES_MAX = 60

LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # The contract's codec: no I/O, imported by both the bridge and the stub box.
    ("proto", ("ftwbridge.proto",)),
    # Small helpers every room may use; they know no room of the bridge.
    (
        "ground",
        (
            "ftwbridge",
            "ftwbridge.atomic",
            "ftwbridge.fairshare",
            "ftwbridge.addresses",
            "ftwbridge.secretfiles",
            "ftwbridge.lifecycle",
            "ftwbridge.statewords",
            "ftwbridge.logs",
            "ftwbridge.extras",
            "ftwbridge.idle",
            # the listeners' connection rules (states, quotas of strangers): the edge's and
            # the door's own listener both keep them
            "ftwbridge.edgerules",
            # what every accept loop shares: the peer's address, words said without waiting,
            # an accept that waits out a full file table in sentences
            "ftwbridge.listening",
        ),
    ),
    # The settings: one frozen model, its rules, its file and its help.
    (
        "config",
        (
            "ftwbridge.config",
            "ftwbridge.config_rules",
            "ftwbridge.configfile",
            "ftwbridge.settings",
            "ftwbridge.cli_help",
        ),
    ),
    ("store", ("ftwbridge.store",)),
    ("keys", ("ftwbridge.keys",)),
    ("door", ("ftwbridge.door",)),
    ("pool", ("ftwbridge.pool",)),
    # The two front rooms, side by side: /mcp (and the framing rules it applies) and sign-in.
    ("front", ("ftwbridge.framing", "ftwbridge.mcp", "ftwbridge.oauth", "ftwbridge.site")),
    # What watches the rooms and guards the listeners.
    (
        "watch",
        (
            "ftwbridge.edge",
            "ftwbridge.readiness",
            "ftwbridge.status",
            "ftwbridge.statewatch",
            "ftwbridge.metrics",
            "ftwbridge.checks",
        ),
    ),
    # Many instances: forwarding, the directory's holdings, the internal listener.
    ("mesh", ("ftwbridge.mesh",)),
    # The HTTP app over every room, and the listeners' start-up.
    (
        "app",
        (
            "ftwbridge.app",
            "ftwbridge.consent_pages",
            "ftwbridge.front",
            "ftwbridge.startup",
            "ftwbridge.parts",
        ),
    ),
    # Composition roots and the commands: only these import across every room.
    (
        "compose",
        (
            "ftwbridge.run",
            "ftwbridge.admin",
            "ftwbridge.backup",
            "ftwbridge.inventory",
            "ftwbridge.dbimport",
            "ftwbridge.cli",
            "ftwbridge.cli_parser",
            "ftwbridge.cli_serve",
            "ftwbridge.__main__",
        ),
    ),
    # The stand-in home box sits apart: it may use `proto` and the ground, never the bridge.
    ("stubbox", ("stubbox",)),
)
"""The layers, lowest first, each a name and the modules or packages in it (a package takes
its submodules). A module may import its own layer and any lower one; importing a higher one
is an arrow up. The order is the bridge's: the codec, helpers, settings, state, the keys
part, the door, the pool, the front rooms, the watchers and the edge, the mesh, the app, and
the composition roots (docs/architecture.md, "Layers")."""


@dataclass(frozen=True)
class Module:
    name: str
    path: Path
    is_package: bool


@dataclass(frozen=True)
class Figures:
    """One checkout's figures (see the module's docstring for what each counts)."""

    product_lines: dict[str, int]
    big_modules: list[tuple[str, int]]
    long_functions: list[tuple[str, int]]
    arrows: set[tuple[str, str]]
    arrows_up: list[tuple[str, str]]
    module_cycles: list[list[str]]
    room_cycles: list[list[str]]


def modules(root: Path = ROOT) -> dict[str, Module]:
    """Every module of the product under `root`, by dotted name."""
    found: dict[str, Module] = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            if is_package:
                parts = parts[:-1]
            found[".".join(parts)] = Module(".".join(parts), path, is_package)
    return found


def _imported(module: Module, node: ast.AST) -> Iterator[str]:
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom):
        if node.level:
            base = module.name.split(".")
            if not module.is_package:
                base = base[:-1]
            base = base[: len(base) - (node.level - 1)]
            source = ".".join([*base, *([node.module] if node.module else [])])
        else:
            source = node.module or ""
        yield source
        yield from (f"{source}.{alias.name}" for alias in node.names)


def _resolve(name: str, known: dict[str, Module]) -> str | None:
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def import_arrows(known: dict[str, Module]) -> set[tuple[str, str]]:
    """Every (importer, imported) pair of product modules, each once."""
    arrows: set[tuple[str, str]] = set()
    for module in known.values():
        for node in ast.walk(ast.parse(module.path.read_text())):
            names = list(_imported(module, node))
            if not names:
                continue
            if isinstance(node, ast.ImportFrom):
                # `from pkg import name` points at pkg.name when it is a module, else at pkg.
                source, *members = names
                targets = [
                    _resolve(member, known) if member in known else _resolve(source, known)
                    for member in members
                ]
            else:
                targets = [_resolve(name, known) for name in names]
            arrows.update(
                (module.name, target)
                for target in targets
                if target is not None and target != module.name
            )
    return arrows


def layer_of(name: str) -> int:
    """The index in `LAYERS` of the most specific entry that holds module `name`.

    Raises:
        KeyError: no layer holds it (a new top-level module must be given one).
    """
    best: tuple[int, int] | None = None
    for index, (_, members) in enumerate(LAYERS):
        for member in members:
            if name == member or name.startswith(member + "."):
                depth = member.count(".") + 1
                if best is None or depth > best[0]:
                    best = (depth, index)
    if best is None:
        raise KeyError(f"{name} is in no layer of devtools.house.LAYERS")
    return best[1]


def room_of(name: str) -> str:
    """A module's room: its subpackage (`ftwbridge.pool`), else itself."""
    parts = name.split(".")
    return ".".join(parts[:2])


def cycles(edges: Iterable[tuple[str, str]]) -> list[list[str]]:
    """The strongly connected sets of more than one node (Tarjan, iteratively), each sorted."""
    graph: dict[str, list[str]] = defaultdict(list)
    for a, b in edges:
        graph[a].append(b)
        graph.setdefault(b, [])
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(graph[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(graph[child])))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                ring = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    ring.append(member)
                    if member == node:
                        break
                if len(ring) > 1:
                    found.append(sorted(ring))
    return sorted(found)


def _sizes(known: dict[str, Module], root: Path) -> tuple[list[tuple[str, int]], ...]:
    big: list[tuple[str, int]] = []
    long: list[tuple[str, int]] = []
    for module in known.values():
        text = module.path.read_text()
        where = module.path.relative_to(root).as_posix()
        lines = len(text.splitlines())
        if lines > MODULE_LINES_MAX:
            big.append((where, lines))
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                span = (node.end_lineno or node.lineno) - node.lineno + 1
                if span > FUNCTION_LINES_MAX:
                    long.append((f"{where}:{node.name}", span))
    return sorted(big), sorted(long)


def figures(root: Path = ROOT) -> Figures:
    """Count everything for the checkout at `root`."""
    known = modules(root)
    arrows = import_arrows(known)
    up = sorted((a, b) for a, b in arrows if layer_of(a) < layer_of(b))
    rooms = {(room_of(a), room_of(b)) for a, b in arrows if room_of(a) != room_of(b)}
    big, long = _sizes(known, root)
    lines = {
        package: sum(
            len(m.path.read_text().splitlines())
            for n, m in known.items()
            if n.split(".")[0] == package
        )
        for package in PACKAGES
    }
    return Figures(lines, big, long, arrows, up, cycles(arrows), cycles(rooms))


def main(argv: list[str]) -> int:
    """Print the figures of the checkout at argv[0] (default: this one)."""
    root = Path(argv[0]).resolve() if argv else ROOT
    f = figures(root)
    print(f"product lines: {f.product_lines} ({sum(f.product_lines.values())} in all)")
    print(f"modules over {MODULE_LINES_MAX} lines: {len(f.big_modules)}")
    for where, lines in f.big_modules:
        print(f"  {lines:5d} {where}")
    print(f"functions over {FUNCTION_LINES_MAX} lines: {len(f.long_functions)}")
    for where, lines in f.long_functions:
        print(f"  {lines:5d} {where}")
    print(f"import arrows: {len(f.arrows)}; running up: {len(f.arrows_up)}")
    for a, b in f.arrows_up:
        print(f"  {a} ({LAYERS[layer_of(a)][0]}) -> {b} ({LAYERS[layer_of(b)][0]})")
    print(f"cycles over modules: {len(f.module_cycles)}; over rooms: {len(f.room_cycles)}")
    for ring in f.module_cycles + f.room_cycles:
        print("  " + " <-> ".join(ring))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
