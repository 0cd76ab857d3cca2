"""The docs say what the code does: the tools `docs/clients.md` lists are the bridge's, and every
count of tools in the README and `docs/` is the code's."""

from __future__ import annotations

import re
from pathlib import Path

from ftwbridge.mcp.control_tools import CONTROL_TOOLS
from ftwbridge.mcp.tools import TOOLS

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

READ = {t.name for t in TOOLS}
CONTROL = {t.name for t in CONTROL_TOOLS}
READ_ONLY = {
    d["name"]
    for d in (t.definition() for t in (*TOOLS, *CONTROL_TOOLS))
    if d.get("annotations", {}).get("readOnlyHint")
}
COUNTS = {"": len(READ | CONTROL), "read ": len(READ), "control ": len(CONTROL)}
COUNTS["read-only "] = len(READ_ONLY)

COUNTED = re.compile(r"\b(\d+) (read-only |read |control )?(?:MCP )?tools\b")
READ_AND_CONTROL = re.compile(r"\b(\d+) read and (\d+) control tools\b")


def test_the_clients_table_names_every_tool_and_no_other() -> None:
    text = (ROOT / "docs" / "clients.md").read_text()
    rows = set(re.findall(r"^\s*\| `([a-z_]+)` \|", text, re.MULTILINE))
    assert rows == READ | CONTROL, {
        "missing": READ | CONTROL - rows,
        "unknown": rows - READ - CONTROL,
    }


def test_every_count_of_tools_in_the_docs_is_the_codes() -> None:
    wrong = []
    for path in DOCS:
        text = " ".join(path.read_text().split())  # a count may be broken over two lines
        for m in COUNTED.finditer(text):
            if int(m.group(1)) != COUNTS[m.group(2) or ""]:
                wrong.append(
                    f"{path.name}: {m.group(0)!r} (the code has {COUNTS[m.group(2) or '']})"
                )
        for m in READ_AND_CONTROL.finditer(text):
            if (int(m.group(1)), int(m.group(2))) != (len(READ), len(CONTROL)):
                wrong.append(f"{path.name}: {m.group(0)!r}")
    assert not wrong, wrong
