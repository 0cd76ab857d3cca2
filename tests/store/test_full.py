"""The embedded store on a full disk: SQLite's own SQLITE_FULL, made with `PRAGMA
max_page_count` (no mount needed, so it runs everywhere; tests/ops/test_full_disk.py fills a
real file system). A write that fails says it is full, keeps what was there, and works again
once there is room."""

from __future__ import annotations

from pathlib import Path

import pytest

from ftwbridge.statewords import Trouble, trouble_of
from ftwbridge.store.sqlite import SqliteStore

NOW = 1_790_000_000_000


async def cap(store: SqliteStore, pages: int | None) -> None:
    """No more pages than the file has now (`None`: SQLite's default bound again)."""

    def set_cap(db: object) -> None:
        (count,) = db.execute("PRAGMA page_count").fetchone()  # type: ignore[attr-defined]
        db.execute(f"PRAGMA max_page_count = {count if pages is None else pages}")  # type: ignore[attr-defined]

    await store.run(set_cap)


@pytest.mark.parametrize("write", ["change", "take_then_put"])
async def test_a_write_in_a_transaction_on_a_full_file_says_it_is_full(
    tmp_path: Path, write: str
) -> None:
    store = SqliteStore(tmp_path / "bridge.sqlite")
    try:
        await store.put_oauth_state("code", "k", {"n": 0}, NOW + 60_000)
        await cap(store, None)
        with pytest.raises(Exception) as caught:
            big = {"n": 1, "pad": "x" * 200_000}
            if write == "change":
                await store.change_oauth_state("code", "k", big, NOW)
            else:
                await store.put_oauth_state("code", "k2", big, NOW + 60_000)
        assert trouble_of(caught.value) is Trouble.FULL, repr(caught.value)
        assert await store.oauth_state("code", "k", NOW) == ({"n": 0}, NOW + 60_000)  # kept whole
        await cap(store, 1_000_000)
        assert await store.change_oauth_state("code", "k", {"n": 2}, NOW) == {"n": 2}
    finally:
        store.close()
