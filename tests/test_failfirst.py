"""A failing test's report starts with its failing line (tests/failfirst.py), even when the
failure crossed nested nurseries and the test wrote hundreds of lines on stderr."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import trio

from tests.failfirst import ROOT, first_failure

FAILING = """
import sys
import trio


async def inner() -> None:
    await trio.sleep(0)
    assert 1 + 1 == 3, "the sum is wrong"


async def forever() -> None:
    await trio.sleep_forever()


async def outer() -> None:
    async with trio.open_nursery() as nursery:
        nursery.start_soon(forever)
        async with trio.open_nursery() as inner_nursery:
            inner_nursery.start_soon(inner)


def test_fails() -> None:
    for n in range(300):
        print(f"stub warning {n}", file=sys.stderr)
    trio.run(outer)
"""


def test_the_first_real_failure_is_found_under_groups_and_cancellations() -> None:
    boom = ValueError("boom")
    group = BaseExceptionGroup("outer", [ExceptionGroup("inner", [boom])])
    assert first_failure(group) is boom
    assert first_failure(BaseExceptionGroup("only", [trio.Cancelled._create()])) is None


def test_the_report_starts_with_the_failing_line(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["tests.failfirst"]\n')
    (tmp_path / "test_it.py").write_text(FAILING)
    env = os.environ | {"PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_it.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    lines = done.stdout.splitlines()
    header = next(n for n, line in enumerate(lines) if "test_fails" in line and "___" in line)
    first = lines[header + 1]
    assert first.endswith("test_it.py:8: AssertionError: the sum is wrong"), done.stdout[:2000]
    assert lines[header + 2].strip() == 'assert 1 + 1 == 3, "the sum is wrong"'
    assert done.stdout.index("the sum is wrong") < done.stdout.index("stub warning 0")
    summary = next(line for line in lines if line.startswith("FAILED"))
    assert "test_it.py:8: AssertionError" in summary
