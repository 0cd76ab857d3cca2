"""callgrind's output files, read the one way every bench here reads them.

    .venv/bin/python bench/callgrind.py OUT [OUT ...]

prints each `--callgrind-out-file`'s count (the largest of it and its numbered dumps)."""

from __future__ import annotations

import argparse
from pathlib import Path


def dump_total(path: Path) -> int:
    """The instructions one callgrind file counts: its `totals:` (or `summary:`) line."""
    lines = path.read_text(errors="replace").splitlines()
    return max(int(x.split()[1]) for x in lines if x.startswith(("totals:", "summary:")))


def total(out: Path) -> int:
    """The largest count among `out` (`--callgrind-out-file`) and the numbered dumps beside it
    (`out.1`, ..., one per `callgrind_control -d`); 0 when there is none."""
    return max((dump_total(f) for f in out.parent.glob(out.name + "*")), default=0)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("out", nargs="+", type=Path, help="a --callgrind-out-file path")
    for out in parser.parse_args().out:
        print(f"{out}: {total(out):,} instructions")
