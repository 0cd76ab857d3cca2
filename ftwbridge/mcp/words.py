"""Every refusal in words: the bridge owns all prose a person or model reads (registry.yaml).

`sentence(code, args)` gives one plain sentence for a registry code and its args; a code the
table does not know (a newer box) still gets a sentence naming it.
"""

from __future__ import annotations

from typing import Any, Final

from ftwbridge.proto.clean import clean
from ftwbridge.proto.names import Code
from ftwbridge.proto.registry import CODES, peer_ms, peer_retry_ms

_WORDS: Final[dict[Code, str]] = {
    Code.E_BOOTING: "The home's box is starting up; try again in a minute.",
    Code.E_UNKNOWN_OP: "The home's box did not understand this request{detail}.",
    Code.E_CMD_EXPIRED: "The command arrived too late and was not carried out.",
    Code.E_PRECONDITION: "The home's state changed, so the command was not carried out.",
    Code.E_CONFLICT: "Someone changed the home's settings at the same time; try again.",
    Code.E_SCOPE_DENIED: "This assistant was not given access to {needScope}.",
    Code.E_GRANT_REVOKED: "The home's owner has withdrawn this assistant's access.",
    Code.E_LAST_OWNER_PROTECTED: "The home's only owner cannot be removed.",
    Code.E_RANGE_TOO_LARGE: "That time range is longer than the home keeps.",
    Code.E_UNAVAILABLE: "{unavailable}",
    Code.E_NEEDS_STEP_UP: "The owner must confirm this on their own device first.",
    Code.E_USE_CMD: "That change moves energy and must be made as a command.",
    Code.E_UNSUPPORTED_MEDIA: "The home answered in a form that cannot be shown here.",
    Code.E_WHOLE_DOCUMENT: "That setting can only be replaced whole.",
    Code.E_LOCAL_ONLY: "That is only available on the box's own page at home.",
    Code.E_RESPONSE_TOO_LARGE: "The home's answer was too large and arrived cut off.",
    Code.E_NO_ACK: "The home never acknowledged the command; nothing was done.",
    Code.E_NO_ANSWER: "The home did not answer in time; try again.",
    Code.E_BAD_BODY: "The home's answer could not be read.",
    Code.E_OP_NOT_GRANTED: "This assistant is not allowed to do {what}.",
    Code.E_GRANT_EXPIRED: "This assistant's access to the home has run out; the owner must renew it.",
    Code.E_CAP_EXCEEDED: "That asks for more than this assistant may ({cap}: at most {max}, asked {asked}).",
    Code.E_RATE_LIMITED: "The home is answering too many requests right now; try again in {seconds} s.",
    Code.E_NEEDS_OWNER: "Only the home's owner can do {op}.",
    Code.E_CLOCK_SKEW: "The home's clock is off by {skew_s} s, more than the {max_s} s allowed; the owner should check its time setting.",
    Code.E_NOT_FOUND: "The home has no {what} called '{id}'.",
}

_UNAVAILABLE: Final[dict[str, str]] = {
    "clock": "The home's box has no clock it can trust, so it cannot serve assistants yet.",
    "assistants": "This home does not take assistants yet: its box has not enabled them.",
    "home": "This home has not connected to the bridge yet.",
    "door": "The home is offline: its box is not connected right now.",
    "keys": "The bridge could not reach its key service; try again shortly.",
    "agent_key": "The bridge holds no key for this assistant; the owner must connect it again.",
    "no_answer": "The home did not answer.",
    "handshake_failed": "The home's box did not complete the secure connection; try again later.",
    "timeout": "The home took too long to answer; try again.",
    "uplink_lost": "The home's box went away during the call; try again when it is back.",
    "superseded": "The home's box reconnected during the call; try again.",
    "restarting": "The bridge is restarting; try again in a moment.",
    "idle": "The connection to the home was closed; try again.",
    "busy": "The bridge is busy; try again in a moment.",
}


def _unavailable(args: dict[str, Any]) -> str:
    for key in ("subsystem", "reason"):
        value = args.get(key)
        if isinstance(value, str) and value in _UNAVAILABLE:
            return _UNAVAILABLE[value]
    return "Part of the home is not available right now; try again later."


MAX_ARG_CHARS = 80


def _text(value: Any, default: str) -> str:
    """An arg as short, clean, single-line text (a box's args are untrusted)."""
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        return default
    return clean(str(value)).replace("\n", " ").replace("\t", " ")[:MAX_ARG_CHARS] or default


def sentence(
    code: str, args: dict[str, Any] | None = None, retry_after_ms: int | None = None
) -> str:
    """One sentence for registry `code` with its `args` (never raises; args are cleaned)."""
    args = args if isinstance(args, dict) else {}
    try:
        known = Code(code)
    except ValueError:
        return f"The home refused the request ({_text(code, 'an unknown code')})."
    retry = peer_retry_ms(retry_after_ms, args)
    skew, top = peer_ms(args.get("skewMs")), peer_ms(args.get("maxMs"))
    fields: dict[str, Any] = {
        "needScope": _text(args.get("needScope"), "this kind of reading"),
        "what": _text(args.get("op") or args.get("t"), "that"),
        "detail": f" ({_text(args.get('t'), '?')})"
        if "t" in args
        else (f" (argument {_text(args.get('arg'), '?')})" if "arg" in args else ""),
        "cap": _text(args.get("cap"), "a limit"),
        "max": _text(args.get("max"), "?"),
        "asked": _text(args.get("asked"), "?"),
        "seconds": max(1, -(-retry // 1000)) if retry is not None else 1,
        "op": _text(args.get("op"), "that"),
        "skew_s": "?" if skew is None else skew // 1000,
        "max_s": "?" if top is None else top // 1000,
        "id": _text(args.get("id"), ""),
        "unavailable": _unavailable(args) if known is Code.E_UNAVAILABLE else "",
    }
    if known is Code.E_NOT_FOUND:
        fields["what"] = _text(args.get("what"), "thing")
    try:
        return _WORDS[known].format(**fields)
    except (KeyError, ValueError, TypeError, IndexError):
        return CODES[known].desc + "."


def covers_every_code() -> bool:
    """Whether every registry code has words (a test pins this)."""
    return set(_WORDS) == set(Code)
