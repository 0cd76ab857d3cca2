"""Holders known in memory (`store/known.py`): events and renewals keep them current with no
lookup a call; a takeover, a holder's death, a 421, an unreachable holder and a gap in the
events each correct them; a missed event never serves a stale holder for long. Pure tests on
trio's MockClock, then the same on PostgreSQL with two instances and real events."""

from __future__ import annotations

import pytest
import trio
import trio.lowlevel
import trio.testing

from ftwbridge.store import StoreError
from ftwbridge.store.directory import Holder
from ftwbridge.store.events import Event, Events
from ftwbridge.store.known import NEGATIVE_S, KnownHolders
from ftwbridge.store.postgres import PgStore
from tests.store.test_directory import Clock, instance

A1 = Holder("a", 1, "http://a.internal")
B2 = Holder("b", 2, "http://b.internal")
PRESENT = {"a": A1.url, "b": B2.url, "me": "http://me.internal"}
BOUND_S = 10.0
"""Bound on a wait for an event on PostgreSQL, seconds."""


class Database:
    """The database's answer to a lookup, which a test sets; counts the lookups."""

    def __init__(self, answer: Holder | None = None) -> None:
        self.answer = answer
        self.lookups = 0
        self.down = False
        self.gate: trio.Event | None = None
        """When set by a test, each lookup reads its answer, then waits for it."""

    async def holder(self, home: str) -> Holder | None:
        self.lookups += 1
        answer = self.answer
        if self.gate is not None:
            await self.gate.wait()
        await trio.lowlevel.checkpoint()
        if self.down:
            raise StoreError("the database does not answer")
        return answer


def _takeover(home: str, holder: Holder) -> Event:
    return Event("takeover", home, {"epoch": holder.epoch, "instance": holder.instance})


def _known(db: Database) -> KnownHolders:
    known = KnownHolders(db.holder, instance_id="me")
    known.present(PRESENT)
    return known


async def test_a_claim_event_names_the_holder_with_no_lookup() -> None:
    db = Database()
    known = _known(db)
    known.hear(_takeover("h", A1))
    for _ in range(3):
        assert await known.holder("h") == A1
    assert db.lookups == 0
    known.hear(Event("roster", "h", {"seq": 4}))  # other kinds name no holder
    assert await known.holder("h") == A1 and db.lookups == 0


async def test_a_takeover_replaces_the_holder_and_an_older_claim_never_does() -> None:
    db = Database()
    known = _known(db)
    known.hear(_takeover("h", A1))
    known.hear(_takeover("h", B2))
    assert await known.holder("h") == B2
    known.hear(_takeover("h", A1))  # late, or replayed: epoch 1 < 2
    known.hear(Event("takeover", "h", {"epoch": "3", "instance": "a"}))  # malformed
    assert await known.holder("h") == B2 and db.lookups == 0


async def test_a_home_not_known_is_looked_up_once_and_kept() -> None:
    db = Database(B2)
    known = KnownHolders(db.holder, instance_id="me")  # no renewal yet: b's URL from the lookup
    assert await known.holder("h") == B2
    assert await known.holder("h") == B2
    assert db.lookups == 1
    db.down = True
    with pytest.raises(StoreError):
        await known.holder("other")


async def test_a_holders_death_drops_its_homes_at_the_next_renewal() -> None:
    db = Database()
    known = _known(db)
    known.hear(_takeover("h", A1))
    known.hear(_takeover("g", B2))
    known.present({"b": B2.url})  # a's presence lock went, or its lease ran out
    assert await known.holder("g") == B2 and db.lookups == 0
    assert await known.holder("h") is None  # no stale a: the database says no one
    assert db.lookups == 1


async def test_a_421_forgets_the_holder_and_the_next_lookup_asks_the_database() -> None:
    db = Database(B2)
    known = _known(db)
    known.hear(_takeover("h", A1))  # and b's claim (epoch 2) was missed
    assert await known.holder("h") == A1
    known.forget("h", A1)  # a answered 421: it no longer holds h at epoch 1
    assert await known.holder("h") == B2
    assert await known.holder("h") == B2 and db.lookups == 1
    known.forget("h", A1)  # a second 421 about the old claim leaves the newer one
    assert await known.holder("h") == B2 and db.lookups == 1


async def test_an_unreachable_holder_is_not_named_again_until_found_present() -> None:
    db = Database()
    known = _known(db)
    known.hear(_takeover("h", A1))
    known.hear(_takeover("g", A1))
    known.forget("h", A1, unreachable=True)
    db.answer = None  # a is gone
    assert await known.holder("h") is None
    assert await known.holder("g") is None  # a's other home is looked up too
    assert db.lookups == 2
    known.present(PRESENT)  # a renewal finds a present again
    known.hear(_takeover("g", Holder("a", 5, A1.url)))
    assert await known.holder("g") == Holder("a", 5, A1.url) and db.lookups == 2


async def test_no_holder_and_this_instance_are_believed_only_briefly(
    autojump_clock: trio.testing.MockClock,
) -> None:
    db = Database(None)
    known = _known(db)
    assert await known.holder("h") is None
    assert await known.holder("h") is None and db.lookups == 1
    db.answer = B2  # b's claim, whose event was missed
    await trio.sleep(NEGATIVE_S)
    assert await known.holder("h") == B2 and db.lookups == 2
    assert await known.holder("h") == B2 and db.lookups == 2  # b's is kept: a 421 corrects it
    mine = Holder("me", 3, PRESENT["me"])
    known.hear(_takeover("h", mine))  # claimed here; its uplink may end with no event
    assert await known.holder("h") == mine and db.lookups == 2
    db.answer = None
    await trio.sleep(NEGATIVE_S)
    assert await known.holder("h") is None and db.lookups == 3


async def test_a_gap_in_the_events_forgets_every_home() -> None:
    db = Database(B2)
    known = _known(db)
    known.hear(_takeover("h", A1))
    known.gap()
    assert await known.holder("h") == B2 and db.lookups == 1
    assert known.statistics() == {"homes": 1, "instances": 3, "lookups": 1}


async def test_an_event_during_a_lookup_is_not_undone_by_its_older_answer() -> None:
    db = Database(None)
    db.gate = trio.Event()
    known = _known(db)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(known.holder, "h")  # reads "no one" ...
        await trio.testing.wait_all_tasks_blocked()
        known.hear(_takeover("h", B2))  # ... while b's claim comes in
        db.gate.set()
    assert await known.holder("h") == B2 and db.lookups == 1


async def test_on_postgres_a_claim_reaches_the_other_instance_in_memory(pg_url: str) -> None:
    """b knows a's claims and takeovers from the events alone, and a's stop at its renewal."""
    async with instance(pg_url, "b", Clock()) as b:
        known = KnownHolders(b.holder, instance_id="b")
        b.on_present = known.present
        heard: list[Event] = []
        got = trio.Event()

        async def on_event(event: Event) -> None:
            known.hear(event)
            heard.append(event)
            got.set()

        async def on_gap() -> None:
            known.gap()

        store = PgStore(pg_url, connections=1)
        await store.start()
        async with trio.open_nursery() as nursery:
            await nursery.start(Events(store).serve, on_event, on_gap)
            async with instance(pg_url, "a", Clock()) as a:
                await b.renew()  # b's renewal: a is present
                assert await a.claim("h1") == 1
                with trio.fail_after(BOUND_S):
                    await got.wait()
                assert await known.holder("h1") == Holder("a", 1, "http://a.internal:8790")
                assert known.lookups == 0
                got = trio.Event()
                assert await b.claim("h1") == 2  # b takes it over
                with trio.fail_after(BOUND_S):
                    await got.wait()
                assert await known.holder("h1") == Holder("b", 2, "http://b.internal:8790")
                got = trio.Event()
                assert await a.claim("h1") == 3
                with trio.fail_after(BOUND_S):
                    await got.wait()
            await b.renew()  # a stopped: gone from the renewal's instances
            assert await known.holder("h1") is None
            assert known.lookups == 1
            nursery.cancel_scope.cancel()
        store.close()
