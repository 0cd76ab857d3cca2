"""`lifecycle.settle_heap`, which `ftwbridge serve`, `ftwbridge keys` and the benches' bridge
call once they serve (docs/performance.md, "The collector"). It is process-wide, so each check
runs in a child Python of its own, never in the test process."""

from __future__ import annotations

import json
import subprocess
import sys

CHECK = """
import gc, json
from ftwbridge.lifecycle import YOUNG_THRESHOLD, settle_heap

class Cycle:
    def __init__(self):
        self.me = self

before = gc.get_threshold()
Cycle()  # garbage in a cycle: collected before the freeze, not kept for good
settle_heap()
alive = [Cycle() for _ in range(3)]
del alive
after_freeze = gc.get_freeze_count()
found = gc.collect()  # what became garbage after the freeze is still collected
print(json.dumps({"before": before, "after": gc.get_threshold(), "frozen": after_freeze,
                  "found": found, "young": YOUNG_THRESHOLD}))
"""


def test_the_start_up_heap_is_frozen_and_the_young_threshold_raised() -> None:
    out = subprocess.run(
        [sys.executable, "-c", CHECK], capture_output=True, text=True, check=True, timeout=60
    )
    got = json.loads(out.stdout)
    assert got["frozen"] > 1000  # modules, classes and functions of the import
    assert got["after"] == [got["young"], *got["before"][1:]]
    assert got["found"] >= 3  # the cycles made after the freeze
