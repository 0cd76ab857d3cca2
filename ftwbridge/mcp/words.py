"""Every refusal in words: the bridge owns all prose a person or model reads (registry.yaml).

`sentence(code, args)` gives one plain sentence for a registry code and its args; a code the
table does not know (a newer box) still gets a sentence naming it.
"""

from __future__ import annotations

from typing import Any, Final

from ftwbridge.proto.clean import clean
from ftwbridge.proto.names import Code
from ftwbridge.proto.registry import CODES, peer_ms, peer_retry_ms

WORDS: Final[dict[Code, str]] = {
    Code.E_BOOTING: "The home's box is starting up; try again in a minute.",
    Code.E_UNKNOWN_OP: "{unknown}",
    Code.E_CMD_EXPIRED: "The command arrived too late and was not carried out.",
    Code.E_PRECONDITION: "The home's state changed, so the command was not carried out.",
    Code.E_CONFLICT: "Someone changed the home's settings at the same time; try again.",
    Code.E_SCOPE_DENIED: "This assistant was not given access to {needScope}.",
    Code.E_GRANT_REVOKED: "The home's owner has withdrawn this assistant's access.",
    Code.E_LAST_OWNER_PROTECTED: "The home's only owner cannot be removed.",
    Code.E_RANGE_TOO_LARGE: "That time range is wider than the home keeps or sends in one"
    " answer{kept}.",
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
    Code.E_CAP_EXCEEDED: "{cap_words}",
    Code.E_RATE_LIMITED: "Too many requests have gone to this home just now; try again in {seconds} s.",
    Code.E_NEEDS_OWNER: "{owner_words}",
    Code.E_CLOCK_SKEW: "The home's clock is off by {skew_s} s, more than the {max_s} s allowed; the owner should check its time setting.",
    Code.E_NOT_FOUND: "The home has no {what} called '{id}'.",
}
"""The sentence for each registry code (every code has one: tests/mcp/test_inbound.py), with
`{field}`s filled from the refusal's details by `sentence`."""

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
    "closed": "The connection to the home closed during the call; try again.",
    "box_shutdown": "The home's box is shutting down; try again when it is back.",
    "epoch_changed": "The home's box restarted its connections during the call; try again.",
    "busy": "The bridge is busy; try again in a moment.",
    # ftwbridge.mesh: the instance holding the home's uplink, another than the one called
    "holder_lost": "The bridge instance serving this home stopped while answering; the call"
    " was not repeated. Try again in a few seconds.",
    "holder_unreachable": "The bridge instance serving this home cannot be reached; try again"
    " in a few seconds.",
    "holder_late": "The bridge instance serving this home did not answer in time; the call was"
    " not repeated. Try again in a few seconds.",
}


def _unavailable(args: dict[str, Any]) -> str:
    for key in ("subsystem", "reason"):
        value = args.get(key)
        if isinstance(value, str) and value in _UNAVAILABLE:
            return _UNAVAILABLE[value]
    return "Part of the home is not available right now; try again later."


MAX_ARG_CHARS = 80
DAY_MS = 86_400_000

_CAPS: Final[dict[str, str]] = {
    # pool.py: the bridge's `sessions_per_home`; `asked` counts the session this call needed
    "sessions": "The home already has {max} assistant sessions open, the most it takes; try"
    " again when one closes.",
    # the grant's `history_days` cap (PROTOCOL.md part B, Caps)
    "history_days": "That reaches further back than this assistant may read: at most {max}"
    " days, asked {asked}.",
    # agents.yaml limits, the same for every assistant
    "history_series": "That asks for {asked} series at once; the home sends at most {max}.",
    # the grant's control caps (agents.yaml caps; PROTOCOL.md part E)
    "hold_s": "That charge would last {asked} s; the owner allows this assistant at most {max} s"
    " at a time.",
    "pending_requests": "This assistant already has {max} requests waiting for the owner, the"
    " most it may; wait for the owner to decide one.",
    "cmds_per_hour": "This assistant has sent {max} commands in the last hour, the most the"
    " owner allows; try again later.",
}

_NONE: Final[dict[str, str]] = {
    # a grant cap of 0 (a uint, PROTOCOL.md part B): the owner allows none at all
    "cmds_per_hour": "commands",
    "reads_per_min": "reads",
    "pending_requests": "requests to them",
    "hold_s": "charging holds",
}

_NOT_FOUND: Final[dict[str, str]] = {
    # diag.run `src` (agents.yaml answers: diag), loadpoint.hold `clear` (agent_ops)
    "src": "driver or device",
    "check": "diagnostic check",
    "hold": "hold by this assistant on a charger",
    "charger": "charger",
    "loadpoint": "charger",
    "car": "car",
    "request": "request",
}


def _unknown(args: dict[str, Any]) -> str:
    """E_UNKNOWN_OP: `{t}` is a message the box refused (unknown to it, or a body it would not
    take: the stub box says so for a malformed `hist.query`), `{arg}` an argument value it
    refused, such as a paging cursor it did not give (PROTOCOL.md part B)."""
    if "arg" in args:
        arg = _text(args.get("arg"), "?")
        if arg in ("before", "after"):
            return (
                f"The home's box does not know that {arg} cursor; use one from its latest"
                " answer, or leave it out to start from the newest."
            )
        return f"The home's box did not accept the value of {arg}."
    if "t" in args:
        field = f" (its {_text(args['field'], '?')})" if "field" in args else ""
        return (
            f"The home's box did not accept the request {_text(args.get('t'), '?')}{field}: it"
            " does not know it or its arguments; its software may be older than the bridge."
        )
    return "The home's box did not accept this request."


def _caps(args: dict[str, Any]) -> str:
    """E_CAP_EXCEEDED `{cap, max, asked}` in the words of the cap named (`_CAPS`)."""
    cap = _text(args.get("cap"), "a limit")
    top, asked = _text(args.get("max"), "?"), _text(args.get("asked"), "?")
    words = _CAPS.get(cap)
    if args.get("max") == 0 and cap in _NONE:
        return f"The owner allows this assistant no {_NONE[cap]}; only they can change that."
    if words is None:
        return f"That asks for more than the home allows ({cap}: at most {top}, asked {asked})."
    return words.format(max=top, asked=asked)


def _owner(args: dict[str, Any]) -> str:
    """E_NEEDS_OWNER `{op, why}` (PROTOCOL.md part E): `durable`, a lasting change only the
    owner makes; `held`, a charger another party holds."""
    op = _text(args.get("op"), "that")
    if args.get("why") == "held":
        return f"Someone else holds that charger now, so only the home's owner can do {op}."
    return (
        f"Only the home's owner can make a lasting change such as {op}; ask them, for example"
        " with a goal request."
    )


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
    kept = args.get("maxMs")  # retention or part G's widest answer: days, past peer_ms's bound
    kept_days = (
        kept // DAY_MS
        if isinstance(kept, int) and not isinstance(kept, bool) and DAY_MS <= kept <= 3650 * DAY_MS
        else None
    )
    fields: dict[str, Any] = {
        "needScope": _text(args.get("needScope"), "this kind of reading"),
        "what": _text(args.get("op") or args.get("t"), "that"),
        "unknown": _unknown(args) if known is Code.E_UNKNOWN_OP else "",
        "cap_words": _caps(args) if known is Code.E_CAP_EXCEEDED else "",
        "owner_words": _owner(args) if known is Code.E_NEEDS_OWNER else "",
        "seconds": max(1, -(-retry // 1000)) if retry is not None else 1,
        "skew_s": "?" if skew is None else skew // 1000,
        "max_s": "?" if top is None else top // 1000,
        "kept": "" if kept_days is None else f" (at most {kept_days} days)",
        "id": _text(args.get("id"), ""),
        "unavailable": _unavailable(args) if known is Code.E_UNAVAILABLE else "",
    }
    if known is Code.E_NOT_FOUND:
        what = _text(args.get("what"), "thing")
        fields["what"] = _NOT_FOUND.get(what, what)
    try:
        return WORDS[known].format(**fields)
    except (KeyError, ValueError, TypeError, IndexError):
        return CODES[known].desc + "."
