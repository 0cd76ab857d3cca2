"""The person's confirmation of a charge, in every client (docs/control.md, "Confirmation by
the person").

Two ways to ask, chosen per call by the deployment's `confirm_commands` and what the client
declares:

- `elicit`: an MCP 2026-07-28 client that declares form elicitation is asked in an MRTR
  `InputRequiredResult` (`mcp/confirm.py`); its answer comes back with the `requestState`.
- `preview`: every other client (the 2025 revisions, or 2026-07-28 without elicitation) first
  gets a tool result that says in plain words what would happen and carries a short-lived,
  signed confirmation token bound like a `requestState` (principal, call digest, expiry,
  `cmdId`); the charge starts only on a second call with the same arguments that carries the
  token as `confirmation`. The tool's description tells the model to show the question to the
  person and to call again only on their yes.

`confirm_commands = "elicit"` (the default) elicits where the client declares it and previews
otherwise; `"preview"` previews for every client; `"off"` asks no one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, Literal, Protocol

from ftwbridge.proto.clean import clean
from ftwbridge.proto.names import Code, Read
from ftwbridge.proto.refusal import Refusal
from ftwbridge.proto.session import Reply
from ftwbridge.store import TokenRecord

from . import confirm
from .confirm import InputRequired
from .inbound import META_CAPABILITIES, Route
from .results import ok_result, text_error

ConfirmMode = Literal["elicit", "preview", "off"]
"""The `confirm_commands` setting's values."""
Way = Literal["elicit", "preview"]

DECLINED: Final = "The person did not confirm, so nothing was done."
AWAITING: Final = "awaiting_confirmation"
"""A preview's `state`: nothing was sent."""
PREVIEW_WORDS: Final = (
    "Nothing was done yet. Show the person the question above, as it is, and wait for their"
    " answer. Only if they say yes, call ev_charge_now again with the same arguments and"
    " confirmation set to the confirmation given here (it is good for {ttl}); if they say no or"
    " do not answer, do nothing. Never pass a confirmation the person did not give."
)
NOT_THIS_CALL: Final = (
    "The confirmation given is not one for this call (other arguments, another assistant's, or"
    " altered), so nothing was done. "
)


class HomeReads(Protocol):
    """What confirmation needs of the home: the charger's name, and new `cmdId`s."""

    async def call(self, home: str, agent_key: bytes, read: str, body: Any) -> Reply:
        """One box read; raises `Refusal`."""

    def new_cmd_id(self) -> str:
        """A new `cmdId` (UUIDv7 text)."""


def _kw(power_w: int) -> str:
    text = f"{power_w / 1000:.2f}".rstrip("0").rstrip(".")
    return f"{text} kW"


def _minutes(n: int) -> str:
    return "1 minute" if n == 1 else f"{n} minutes"


class Consent:
    """Asks the person before a charge, by elicitation or by preview.

    Args:
        homes: the charger names and new `cmdId`s.
        wall_ms: the bridge's wall clock, ms since the epoch.
        ttl_s: how long the person has to confirm, seconds (a state's and a token's life).
        mode: the `confirm_commands` setting.
    """

    def __init__(
        self,
        *,
        homes: HomeReads,
        wall_ms: Callable[[], int],
        ttl_s: float,
        mode: ConfirmMode,
    ) -> None:
        self._homes = homes
        self._wall_ms = wall_ms
        self._mode = mode
        self._states = confirm.ConfirmStates(ttl_s=ttl_s)

    @property
    def states(self) -> confirm.ConfirmStates:
        """The sealed states (tests seal and open with it)."""
        return self._states

    def way(self, route: Route) -> Way | None:
        """How this call's person is asked: `elicit` for a 2026-07-28 client that declares
        form elicitation (unless the setting is `preview`), `preview` for every other client,
        None when the setting is `off`."""
        if self._mode == "off":
            return None
        meta = route.params.get("_meta")
        caps = meta.get(META_CAPABILITIES) if isinstance(meta, dict) else None
        if self._mode == "elicit" and route.era == "modern" and confirm.wants_confirmation(caps):
            return "elicit"
        return "preview"

    async def ask(
        self, way: Way, args: Any, token: TokenRecord, route: Route, digest: str
    ) -> str | InputRequired | dict[str, Any]:
        """The `cmdId` to send under when the person confirmed; else what to answer: the
        question (`InputRequired`), the preview (a tool result), or the declined result.

        Raises:
            confirm.StateRefused: (elicit) a `requestState` that is not ours for this call.
            Refusal: `E_NOT_FOUND` for a charger the home does not list (no one is asked).
        """
        principal = f"{token.home}\x00{token.agent_key.hex()}"
        now = self._wall_ms()
        if way == "elicit":
            state = route.params.get("requestState")
            given = confirm.answer(route.params.get("inputResponses"))
        else:
            state, given = args.confirmation, "accept"
        lead = ""
        if state is not None:
            try:
                opened = self._states.open(
                    state, principal=principal, digest=digest, now_ms=now, purpose=way
                )
            except confirm.StateExpired:
                lead = "That confirmation ran out. "
            except confirm.StateRefused:
                if way == "elicit":
                    raise
                lead = NOT_THIS_CALL
            else:
                if given is not None:
                    final = self._states.settle(opened, given, now_ms=now)
                    return opened.cmd_id if final == "accept" else text_error(DECLINED)
        name = await self._charger_name(token, args.charger)
        question = (
            f"Charge {name} at {_kw(args.power_w)} for {_minutes(args.minutes)}?"
            " It stops by itself after that."
        )
        cmd_id = self._homes.new_cmd_id()
        sealed = self._states.seal(
            principal=principal, digest=digest, cmd_id=cmd_id, now_ms=now, purpose=way
        )
        if way == "elicit":  # (a refused state was raised above: `lead` is "" or ran out)
            return InputRequired(confirm.question(lead + question), sealed)
        return self._preview(args.charger, cmd_id, question, sealed, lead, now)

    def _preview(
        self, charger: str, cmd_id: str, question: str, sealed: str, lead: str, now: int
    ) -> dict[str, Any]:
        """The preview's tool result: `state: awaiting_confirmation`, the question for the
        person, the token and when it expires (ms since the epoch), and the model's words."""
        ttl_s = self._states.ttl_ms // 1000
        ttl = _minutes(ttl_s // 60) if ttl_s % 60 == 0 else f"{ttl_s} seconds"
        return ok_result(
            {
                "cmdId": cmd_id,
                "state": AWAITING,
                "charger": charger,
                "question": question,
                "confirmation": sealed,
                "confirmationExpiresAtMs": now + self._states.ttl_ms,
                "message": lead + PREVIEW_WORDS.format(ttl=ttl),
            }
        )

    async def _charger_name(self, token: TokenRecord, charger: str) -> str:
        """The charger's name as the home lists it (cleaned), for the person's question.

        Raises:
            Refusal: `E_NOT_FOUND {what: charger, id}` when the home lists no such charger.
        """
        reply = await self._homes.call(token.home, token.agent_key, Read.LOADPOINTS_GET, None)
        rows = reply.body.get("loadpoints") if isinstance(reply.body, dict) else None
        for row in rows if isinstance(rows, list) else []:
            if isinstance(row, dict) and row.get("id") == charger:
                name = row.get("name")
                shown = clean(name).replace("\n", " ")[:64].strip() if isinstance(name, str) else ""
                return shown or charger
        raise Refusal(Code.E_NOT_FOUND, {"what": "charger", "id": charger})
