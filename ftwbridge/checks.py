"""The checks behind `/readyz` (`ftwbridge/readiness.py` judges them): the state folder or
database is there (`ftwbridge/statewatch.py`), and the store and the keys part each answer,
side by side, within `CHECK_S`."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import trio

from ftwbridge.keys import KeysPort
from ftwbridge.keys.service import KeysError
from ftwbridge.readiness import CHECK_S, Readiness, Verdict
from ftwbridge.statewatch import StateWatch
from ftwbridge.statewords import state_sentence
from ftwbridge.store import BridgeStore, StoreError


@dataclass(kw_only=True)
class ReadyChecks:
    """One bridge's readiness checks.

    Attributes:
        store: the bridge's store, asked for an unknown home's key.
        keys: the keys part, asked whether it holds an all-zero key.
        keys_socket: the keys part's socket path, named in its problem's words, if any.
        draining: whether the bridge is stopping (`Pool.draining`).
        state_dir: the state folder, named when its disk is full, read-only or damaged.
        state_watch: the embedded bridge's watch on its state folder, once serving.
    """

    store: BridgeStore
    keys: KeysPort
    keys_socket: Path | None
    draining: Callable[[], bool]
    state_dir: Path
    state_watch: StateWatch | None = None
    judge: Readiness = field(default_factory=Readiness)

    async def verdict(self) -> Verdict:
        """What `/readyz` says: not ready while the state folder or database is gone or
        replaced; else its disk's fullness, and the store and the keys part checked side by
        side, each within `CHECK_S` seconds."""
        if self.state_watch is not None and (gone := self.state_watch.not_ready()) is not None:
            return Verdict(False, gone)
        problems: dict[str, str | None] = {}
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._store_problem, problems)
            nursery.start_soon(self._keys_problem, problems)
        return self.judge.judge(
            draining=self.draining(),
            store=problems["store"],
            keys=problems["keys"],
            disk=None if self.state_watch is None else self.state_watch.disk_full(),
        )

    async def _store_problem(self, out: dict[str, str | None]) -> None:
        out["store"] = None
        try:
            with trio.fail_after(CHECK_S):
                await self.store.home_key("")
        except StoreError as exc:
            out["store"] = str(exc)
        except (trio.TooSlowError, OSError, sqlite3.Error) as exc:
            said = state_sentence(exc, self.state_dir)  # full, read-only, damaged
            out["store"] = said or f"the store does not answer ({type(exc).__name__})"

    async def _keys_problem(self, out: dict[str, str | None]) -> None:
        out["keys"] = None
        try:
            with trio.fail_after(CHECK_S):
                await self.keys.has(bytes(32))
        except (trio.TooSlowError, KeysError, OSError) as exc:
            where = f" at {self.keys_socket}" if self.keys_socket else ""
            out["keys"] = f"the keys part{where} does not answer ({exc or type(exc).__name__})"
