"""Every refusal in words: the bridge owns all prose a person or model reads (registry.yaml).

`sentence(code, args)` gives one plain sentence for a registry code and its args; a code the
table does not know (a newer box) still gets a sentence naming it.
"""

from __future__ import annotations

from typing import Any, Final

from ftwbridge.proto.names import Code
from ftwbridge.proto.registry import CODES

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
    Code.E_NOT_FOUND: "The home has no {what} called {id!r}.",
}

_UNAVAILABLE: Final[dict[str, str]] = {
    "clock": "The home's box has no clock it can trust, so it cannot serve assistants yet.",
    "assistants": "This home does not take assistants yet: its box has not enabled them.",
    "home": "This home has not connected to the bridge yet.",
    "door": "The home is offline: its box is not connected right now.",
    "keys": "The bridge could not reach its key service; try again shortly.",
    "agent_key": "The bridge holds no key for this assistant; the owner must connect it again.",
    "no_answer": "The home did not answer.",
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


def sentence(
    code: str, args: dict[str, Any] | None = None, retry_after_ms: int | None = None
) -> str:
    """One sentence for registry `code` with its `args` (never raises)."""
    args = dict(args or {})
    try:
        known = Code(code)
    except ValueError:
        return f"The home refused the request ({code})."
    retry = retry_after_ms if retry_after_ms is not None else args.get("retryAfterMs")
    fields: dict[str, Any] = {
        "needScope": args.get("needScope", "this kind of reading"),
        "what": args.get("op") or args.get("t") or "that",
        "detail": f" ({args['t']})"
        if "t" in args
        else (f" (argument {args['arg']})" if "arg" in args else ""),
        "cap": args.get("cap", "a limit"),
        "max": args.get("max", "?"),
        "asked": args.get("asked", "?"),
        "seconds": max(1, -(-int(retry) // 1000)) if isinstance(retry, int) else 1,
        "op": args.get("op", "that"),
        "skew_s": int(args.get("skewMs", 0)) // 1000,
        "max_s": int(args.get("maxMs", 0)) // 1000,
        "id": args.get("id", ""),
        "unavailable": _unavailable(args) if known is Code.E_UNAVAILABLE else "",
    }
    if known is Code.E_NOT_FOUND:
        fields["what"] = args.get("what", "thing")
    try:
        return _WORDS[known].format(**fields)
    except (KeyError, ValueError, TypeError):
        return CODES[known].desc + "."


def covers_every_code() -> bool:
    """Whether every registry code has words (a test pins this)."""
    return set(_WORDS) == set(Code)
