"""`/readyz`'s judgement (`ftwbridge/readiness.py`): not ready while draining or before the
store and the keys part have answered once; after that an outage of either only degrades."""

from __future__ import annotations

from ftwbridge.readiness import Readiness, Verdict

STORE = "the store does not answer (TooSlowError)"
KEYS = "the keys part does not answer (TooSlowError)"


def test_a_part_that_never_answered_keeps_the_instance_out() -> None:
    r = Readiness()
    assert r.judge(draining=False, store=None, keys=KEYS) == Verdict(False, KEYS)
    assert r.judge(draining=False, store=None, keys=KEYS).text() == f"not ready: {KEYS}"
    assert r.judge(draining=False, store=None, keys=None) == Verdict(True)


def test_an_outage_after_the_start_degrades_and_draining_ends_readiness() -> None:
    r = Readiness()
    assert r.judge(draining=False, store=None, keys=None).text() == "ready"
    for store, keys in ((STORE, None), (None, KEYS), (STORE, KEYS)):
        verdict = r.judge(draining=False, store=store, keys=keys)
        assert verdict.ready, verdict
        assert verdict.text().startswith("ready, degraded: ")
        assert verdict.text().endswith("; warm sessions are still served")
    assert r.judge(draining=False, store=STORE, keys=KEYS).text() == (
        f"ready, degraded: {STORE}; {KEYS}; warm sessions are still served"
    )
    assert r.judge(draining=True, store=None, keys=None) == Verdict(
        False, "draining: the bridge is stopping"
    )


def test_a_full_disk_degrades_readiness_in_words() -> None:
    r = Readiness()
    disk = "the disk holding the state folder /s is full (0 KiB free): ..."
    assert r.judge(draining=False, store=None, keys=None, disk=disk).text() == (
        f"ready, degraded: {disk}"
    )
    assert r.judge(draining=False, store=STORE, keys=None, disk=disk).text() == (
        f"ready, degraded: {STORE}; {disk}; warm sessions are still served"
    )
    assert not r.judge(draining=True, store=None, keys=None, disk=disk).ready
