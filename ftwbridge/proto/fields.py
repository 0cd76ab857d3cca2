"""Field checks shared by part E's message parsers (`proto/control.py`, `proto/goals.py`).

Each check takes a decoded CBOR map and a key, returns the value typed, or raises `BadBody`
naming the field. Limits (characters, uints) are ours where PROTOCOL.md part E is silent
(docs/protocol.md).
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Any, Final, TypeVar

from .errors import RemoteProtocolError

MAX_TEXT: Final = 64
"""Longest id a control message carries (charger, car, lease, request ids), in characters."""
MAX_NOTE: Final = 280
"""Longest `note` of a goal request, in characters."""
MAX_UINT: Final = 2**63 - 1
MAX_REQUESTS: Final = 256
"""Most goal records one `requests` answer may carry."""
UUID7: Final = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")


class BadBody(RemoteProtocolError):
    """A control message's body breaks part E's shape; `field` names the first bad field
    (`"b"` for the body itself). A box answers it `E_UNKNOWN_OP {arg: field}` (as it does any
    bad read argument); the bridge ends the call with `E_BAD_BODY`."""

    def __init__(self, field_: str, why: str) -> None:
        super().__init__(f"{field_}: {why}")
        self.field = field_


def as_map(value: Any, name: str) -> dict[str, Any]:
    """`value` as a map with text keys, else `BadBody(name)`."""
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise BadBody(name, "is not a map with text keys")
    return value


def uint(body: dict[str, Any], key: str, *, low: int = 0, high: int = MAX_UINT) -> int:
    """`body[key]` as an integer in `low..high` (not a bool), else `BadBody(key)`."""
    v = body.get(key)
    if isinstance(v, bool) or not isinstance(v, int):
        raise BadBody(key, "is not an integer")
    if not low <= v <= high:
        raise BadBody(key, f"is outside {low}..{high}")
    return v


def text(body: dict[str, Any], key: str, *, most: int = MAX_TEXT) -> str:
    """`body[key]` as non-empty text of at most `most` characters, else `BadBody(key)`."""
    v = body.get(key)
    if not isinstance(v, str) or not v:
        raise BadBody(key, "is not a non-empty text")
    if len(v) > most:
        raise BadBody(key, f"is longer than {most} characters")
    return v


def only(args: dict[str, Any], keys: set[str], name: str) -> None:
    """Refuse a key of `args` outside `keys`: `BadBody("<name>.<key>")`."""
    extra = sorted(set(args) - keys)
    if extra:
        raise BadBody(f"{name}.{extra[0]}", "is not a field of this shape")


def cmd_id_field(body: dict[str, Any]) -> str:
    """`body["cmdId"]`: a UUIDv7 in lower-case text (part E), else `BadBody("cmdId")`."""
    v = body.get("cmdId")
    if not isinstance(v, str) or not UUID7.fullmatch(v):
        raise BadBody("cmdId", "is not a UUIDv7 in lower-case text")
    return v


E = TypeVar("E", bound=StrEnum)


def member(cls: type[E], body: dict[str, Any], key: str) -> E:
    """`body[key]` as a member of `cls`, else `BadBody(key)` listing the members."""
    v = body.get(key)
    for member in cls:
        if v == member.value:
            return member
    raise BadBody(key, f"is not one of {', '.join(cls)}")


def prefixed(exc: BadBody, prefix: str) -> BadBody:
    """`exc` with its field named under `prefix` (`args.power_w`), unless it already is."""
    if exc.field.startswith(prefix + "."):
        return exc
    return BadBody(f"{prefix}.{exc.field}", str(exc).split(": ", 1)[-1])
