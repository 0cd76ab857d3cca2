"""A stub home's owner state at rest, so that a restarted `python -m stubbox --state DIR`
carries on where it stopped, as a real box does.

The bridge keeps the newest roster of each home and refuses any roster whose `seq` is not
greater (PROTOCOL.md part B). A box that forgot its roster on restart would start again at
seq 1 and be refused, and the agents its owner granted would be gone. So each home keeps one
file in DIR, named after the home (`state_path`), holding what the owner needs to go on:

    {"v": 1, "home": <home id>, "homeKey": <hex, the home's Ed25519 public key, 32 bytes>,
     "seq": <the roster's seq, for people reading the file>,
     "roster": <hex, the newest SignedRoster bytes exactly as signed>,
     "requests": [<agent.request body with "key" in hex>, ...],
     "goals": [<goal request: `requests` entry + agent "key" (hex), "agent", "expiresAtMs">, ...],
     "controls": {"mode": <site mode>, "targets": {<car>: <permille>}}}

`goals` and `controls` (PROTOCOL.md part E) hold the goal requests of the last 30 days, waiting
or decided, and what the owner's approvals changed; a file without them (written before
goal requests existed) loads with none. Holds and the idempotency table are not kept: a restarted box has ended
every hold, as its charger has.

The file holds public data and roster rows only, never a private key: the keys derive from
`--seed`. On load the roster is verified against the home key derived from that seed, so a
file written under another seed, for another home, or damaged is refused whole with one
sentence naming the file and what to do (`StateError`).

A write goes to a unique temporary file in the same folder, is flushed and fsynced, renamed
over the file, and the folder is fsynced: a crash leaves the old file or the new one, never a
mix. `StateKeeper` writes one file at a time. The blocking calls run in `trio.to_thread`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import trio

from ftwbridge.atomic import write_atomic
from ftwbridge.proto.names import Mode
from ftwbridge.proto.roster import KEY_BYTES, Roster, RosterRefused, verify_roster

from .charger import Controls
from .goals import Entry

STATE_VERSION = 1
"""The `v` of the state file this code writes and reads."""

AFRESH = (
    "restore it from a backup, or move it aside to start home {home!r} afresh at roster seq 1"
    " (a bridge that holds a newer roster then refuses this home's rosters until their seq"
    " passes the one it holds)"
)


class StateError(Exception):
    """A state file that cannot be read, used or written; the message is one sentence for the
    operator, naming the file and what to do."""


@dataclass(frozen=True, slots=True)
class Kept:
    """What a state file restores: the owner's newest roster (verified, `signed` holding its
    bytes), the assistants waiting for the owner's answer (`agent.request` bodies by `req`,
    `key` as 32 bytes), the goal requests (`stubbox.goals.Entry`) and the site's mode and cars'
    targets (None: the home's own)."""

    roster: Roster
    requests: dict[str, dict[str, Any]]
    goals: list[Entry] = field(default_factory=list)
    mode: str | None = None
    targets: dict[str, int] | None = None


def state_path(folder: Path, home: str) -> Path:
    """The state file of `home` in `folder`: the home id, percent-encoded so that any id is
    one plain file name, plus `.json` (`demo-home` -> `demo-home.json`)."""
    return folder / f"{quote(home, safe='')}.json"


def _json_value(value: Any) -> bool:
    if value is None or isinstance(value, str | int | float | bool):
        return True
    if isinstance(value, list):
        return all(_json_value(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _json_value(v) for k, v in value.items())
    return False


def encode_state(
    *,
    home: str,
    home_key: bytes,
    signed: bytes,
    seq: int,
    requests: Mapping[str, Any],
    goals: Sequence[Entry] = (),
    controls: Controls | None = None,
) -> bytes:
    """The state file's bytes (UTF-8 JSON) for `home`: its Ed25519 public key (32 bytes), the
    newest SignedRoster bytes and their seq, the waiting `agent.request` bodies, the goal
    requests and the controls the owner set. A body's `key` is written in hex; fields that
    JSON cannot hold (none the door sends) are left out."""
    rows = []
    for body in requests.values():
        row = {k: v for k, v in body.items() if k != "key" and _json_value(v)}
        rows.append(row | {"key": bytes(body["key"]).hex()})
    doc = {
        "v": STATE_VERSION,
        "home": home,
        "homeKey": home_key.hex(),
        "seq": seq,
        "roster": signed.hex(),
        "requests": rows,
        "goals": [g.to_row() for g in goals],
    }
    if controls is not None:
        doc["controls"] = {"mode": controls.mode, "targets": dict(controls.targets)}
    return json.dumps(doc, indent=1, sort_keys=True).encode() + b"\n"


def _hex(value: Any, what: str) -> bytes:
    if not isinstance(value, str):
        raise ValueError(f"{what} is not hex text")
    return bytes.fromhex(value)  # ValueError names the bad character


def _request(row: Any) -> dict[str, Any]:
    if not isinstance(row, dict):
        raise ValueError("a waiting request is not an object")
    key = _hex(row.get("key"), "a waiting request's key")
    if len(key) != KEY_BYTES or not isinstance(row.get("req"), str):
        raise ValueError("a waiting request lacks its req or its 32-byte key")
    if not isinstance(row.get("scopes"), list):
        raise ValueError("a waiting request lacks its scopes")
    return row | {"key": key}


def decode_state(data: bytes, *, path: Path, home: str, home_key: bytes) -> Kept:
    """Read a state file's bytes (`path` only names it in errors) for `home`, whose Ed25519
    public key (32 bytes) must have signed the roster.

    Raises:
        StateError: not a state file of this code, for another home or key, or a roster
            that fails verification (PROTOCOL.md part B).
    """
    afresh = AFRESH.format(home=home)
    try:
        doc = json.loads(data)
        if not isinstance(doc, dict):
            raise ValueError("it is not a JSON object")
        if doc.get("v") != STATE_VERSION:
            raise ValueError(f"its version {doc.get('v')!r} is not {STATE_VERSION}")
        if doc.get("home") != home:
            raise ValueError(f"it was written for home {doc.get('home')!r}")
        if _hex(doc.get("homeKey"), "homeKey") != home_key:
            raise StateError(
                f"the state file {path} was written under another home key; start home"
                f" {home!r} with the --seed it was written with, or {afresh}"
            )
        signed = _hex(doc.get("roster"), "roster")
        rows = doc.get("requests")
        if not isinstance(rows, list):
            raise ValueError("requests is not a list")
        requests = {r["req"]: r for r in map(_request, rows)}
        goals = [Entry.from_row(g) for g in _list(doc.get("goals", []), "goals")]
        mode, targets = _controls(doc.get("controls"))
        roster = verify_roster(signed, home_key=home_key, home=home)
    except StateError:
        raise
    except RosterRefused as exc:
        raise StateError(
            f"the roster in the state file {path} fails verification ({exc.problem.value});"
            f" {afresh}"
        ) from exc
    except ValueError as exc:  # json.JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise StateError(f"the state file {path} is not usable ({exc}); {afresh}") from exc
    return Kept(roster, requests, goals, mode, targets)


def _list(value: Any, what: str) -> list[Any]:
    if not isinstance(value, list):
        raise ValueError(f"{what} is not a list")
    return value


def _controls(value: Any) -> tuple[str | None, dict[str, int] | None]:
    if value is None:
        return None, None
    mode = value.get("mode") if isinstance(value, dict) else None
    targets = value.get("targets") if isinstance(value, dict) else None
    if mode not in set(Mode) or not isinstance(targets, dict):
        raise ValueError("controls lacks a known mode or its targets")
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in targets.values()):
        raise ValueError("a car's target is not an integer")
    return mode, targets


async def load_state(path: Path, *, home: str, home_key: bytes) -> Kept | None:
    """The state kept in `path` for `home` (Ed25519 public key, 32 bytes), or None when there
    is no such file (a home's first start).

    Raises:
        StateError: the file cannot be read or is not usable (see `decode_state`).
    """
    try:
        data = await trio.Path(path).read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StateError(
            f"cannot read the state file {path} ({exc.strerror or exc}); make it readable by"
            f" this user, or {AFRESH.format(home=home)}"
        ) from exc
    return decode_state(data, path=path, home=home, home_key=home_key)


class StateKeeper:
    """Writes one home's state file, one write at a time.

    Args:
        path: the file (see `state_path`).
        snapshot: returns the state's bytes as they are now (`encode_state`); called when a
            write begins, so each write holds the newest state.
    """

    def __init__(self, path: Path, snapshot: Callable[[], bytes]) -> None:
        self.path = path
        self._snapshot = snapshot
        self._lock = trio.Lock()
        self.writes = 0
        """Writes completed."""

    async def save(self) -> None:
        """Write the state as it is now; returns once it is on disk (renamed, folder synced).
        A cancel arriving meanwhile waits for the write to finish.

        Raises:
            StateError: the file could not be written (the old file stays as it was).
        """
        async with self._lock:
            data = self._snapshot()
            try:
                await trio.to_thread.run_sync(write_atomic, self.path, data)
            except OSError as exc:
                raise StateError(
                    f"cannot write the state file {self.path} ({exc.strerror or exc}); free"
                    f" space or fix permissions in {self.path.parent}, then try again"
                ) from exc
            self.writes += 1
