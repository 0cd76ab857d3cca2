"""This instance's claims kept with the door's uplinks (`mesh.Holdings`), with a directory in memory and a door stand-in: a forward naming a claim still under way
here waits for it; a takeover closes the uplink here (4409). trio's MockClock runs the waits."""

from __future__ import annotations

import trio

from ftwbridge.mesh.holdings import CLAIM_WAIT_S, Holdings
from ftwbridge.store.directory import LocalDirectory


class SlowDirectory(LocalDirectory):
    """`LocalDirectory` whose claims return once `let_go` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.let_go = trio.Event()

    async def claim(self, home: str) -> int:
        epoch = await super().claim(home)
        await self.let_go.wait()
        return epoch


class Door:
    def __init__(self) -> None:
        self.superseded: list[str] = []

    async def supersede(self, home: str) -> None:
        self.superseded.append(home)


async def test_a_forward_waits_for_a_claim_under_way(autojump_clock: object) -> None:
    directory = SlowDirectory()
    holdings = Holdings(directory, Door())  # type: ignore[arg-type]
    answers: list[tuple[bool, float]] = []

    async def ask() -> None:
        answers.append((await holdings.holds("h", 1), trio.current_time()))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(holdings.up, "h")
        await trio.sleep(0.1)
        nursery.start_soon(ask)
        await trio.sleep(0.5)
        assert answers == []  # the claim has not returned here yet: the answer waits
        directory.let_go.set()
    assert answers == [(True, 0.6)]
    assert await holdings.holds("h", 1) and not await holdings.holds("h", 2)


async def test_a_claim_that_never_returns_is_waited_for_a_bounded_time(
    autojump_clock: object,
) -> None:
    directory = SlowDirectory()
    holdings = Holdings(directory, Door())  # type: ignore[arg-type]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(holdings.up, "h")
        await trio.sleep(0.1)
        start = trio.current_time()
        assert not await holdings.holds("h", 1)
        assert trio.current_time() - start == CLAIM_WAIT_S
        nursery.cancel_scope.cancel()


async def test_a_takeover_closes_the_uplink_here_and_a_release_follows_the_claim() -> None:
    directory = LocalDirectory()
    door = Door()
    holdings = Holdings(directory, door)  # type: ignore[arg-type]
    await holdings.up("h")
    assert await holdings.holds("h", 1)
    await holdings.lost("h")
    assert door.superseded == ["h"] and not await holdings.holds("h", 1)
    await holdings.down("h")  # the uplink's end after the takeover releases nothing
    assert await directory.holder("h") is not None
    await holdings.up("h")
    await holdings.down("h")
    assert await directory.holder("h") is None
