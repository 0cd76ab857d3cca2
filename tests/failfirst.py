"""A pytest plugin: a test that fails inside nurseries shows its failing line first.

A failure in a trio test arrives wrapped in one exception group per nursery it crossed (the
test's, the `mcp` client's, anyio's), so pytest prints dozens of frames of library code before
the assertion, and its one-line summary may name the group. This puts the first real failure
(not `trio.Cancelled`) at the top of the report, as `file:line: Error: message` and the failing
source line, then the whole traceback as pytest wrote it; captured output follows as before.
"""

from __future__ import annotations

import traceback
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest
import trio

ROOT = Path(__file__).resolve().parent.parent


def first_failure(exc: BaseException) -> BaseException | None:
    """The first leaf of the group `exc` that is not a cancellation, depth first, or None."""
    if isinstance(exc, BaseExceptionGroup):
        for sub in exc.exceptions:
            found = first_failure(sub)
            if found is not None:
                return found
        return None
    return None if isinstance(exc, trio.Cancelled) else exc


def headline(exc: BaseException, root: Path = ROOT) -> str:
    """`file:line: Type: message` for the deepest frame of `exc` under `root` (the test run's
    root folder; else its deepest frame), then that source line and the rest of the message,
    indented."""
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [
        f for f in frames if f.filename.startswith(f"{root}/") and "site-packages" not in f.filename
    ]
    frame = (ours or frames or [None])[-1]
    where = ""
    if frame is not None:
        name = frame.filename.removeprefix(f"{root}/")
        where = f"{name}:{frame.lineno}: "
    first, *rest = (str(exc) or "").splitlines() or [""]
    lines = [f"{where}{type(exc).__name__}: {first}"]
    if frame is not None and frame.line:
        lines.append(f"    {frame.line}")
    lines += [f"    {line}" for line in rest]
    return "\n".join(lines)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, Any, pytest.TestReport]:
    report: pytest.TestReport = yield
    if report.failed and call.excinfo is not None:
        exc = call.excinfo.value
        leaf = first_failure(exc) if isinstance(exc, BaseExceptionGroup) else None
        if leaf is not None:
            report.longrepr = (
                f"{headline(leaf, item.config.rootpath)}\n\n(the whole traceback, with its exception groups:)\n"
                f"{report.longrepr}"
            )
    return report
