"""The control tools of PROTOCOL.md part E: their typed arguments, schemas and annotations.

`ev_charge_now` and `ev_stop` become the upstream `cmd` with op `loadpoint.hold` (a bounded
hold, or its release); `goal_request` becomes `goal.request` (the owner decides at home);
`requests_list` is the `requests.get` read. Names, scopes, goals and modes come from the
contract files (`agents.yaml` `agent_ops`, `goals`, `goal_messages`; `registry.yaml` `ops`,
`modes`); nothing here types a contract name twice.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, Field, RootModel

from ftwbridge.proto.fields import MAX_NOTE
from ftwbridge.proto.names import AgentOp, Cap, Goal, Mode, Read, Scope
from ftwbridge.proto.registry import CAPS, OP_SCOPE, READ_SCOPES, READS

from .args import NoArgs, _Args
from .identity import ICONS
from .schemas import OUTPUT_SCHEMAS

HOLD_OP: Final = AgentOp.LOADPOINT_HOLD
"""The one op an agent may command (agents.yaml `agent_ops`)."""
GOAL_SCOPE: Final = READS[Read.REQUESTS_GET].scope
"""`ftw.goals.write`: asking the owner and reading the requests (agents.yaml `goal_messages`,
`reads`)."""
MODES: Final[tuple[str, ...]] = tuple(m.value for m in Mode)
DISPATCH_SCOPE: Final = OP_SCOPE[HOLD_OP.value]
HOLD_CEILING_S: Final = CAPS[Cap.HOLD_S].ceiling
DEFAULT_MINUTES: Final = 15
"""A charge's length when the call names none (PROTOCOL.md part E)."""
CHARGER_PATTERN: Final = r"^[A-Za-z0-9._:-]{1,64}$"
"""A charger or car id as the box lists it: an identifier, never free text (so it may be
logged in the audit line as it came)."""
MAX_JSON_INT: Final = 2**53 - 1
"""The largest integer every JSON client carries exactly (RFC 8259 section 6); larger ones
would also leave CBOR's 64 bits and reach the box as a bignum it refuses (a dropped request)."""
MAX_POWER_W: Final = 50_000
"""The most power one hold may ask, in W (above any home charger; the box bounds it too)."""


class ChargeNowArgs(_Args):
    """`ev_charge_now`: charge at `power_w` (W) on `charger` for `minutes`."""

    charger: str = Field(
        pattern=CHARGER_PATTERN, description="The charger's id, as chargers_list lists it"
    )
    power_w: int = Field(ge=1, le=MAX_POWER_W, description="Charging power in W, e.g. 7400")
    minutes: int = Field(
        default=DEFAULT_MINUTES,
        ge=1,
        le=HOLD_CEILING_S // 60,
        description="How long to charge, in minutes (at most what the owner allowed, 15 unless"
        " they said otherwise); the charger then goes back to its own plan",
    )
    confirmation: str | None = Field(
        default=None,
        max_length=1024,
        pattern=r"^[A-Za-z0-9_.-]{1,1024}$",
        description="Only after the person said yes to the question of an"
        " awaiting_confirmation answer: its confirmation, with the same other arguments",
    )


class StopArgs(_Args):
    """`ev_stop`: end this assistant's hold on `charger`."""

    charger: str = Field(
        pattern=CHARGER_PATTERN, description="The charger's id, as chargers_list lists it"
    )


class _Goal(_Args):
    note: str | None = Field(
        default=None,
        max_length=MAX_NOTE,
        description="A short note for the owner, e.g. why you ask",
    )


class EvTargetGoal(_Goal):
    """Have a car charged to `soc_permille` by `by_ms` (ms since the epoch)."""

    goal: Literal[Goal.EV_TARGET]
    car: str = Field(pattern=CHARGER_PATTERN, description="The car's id, as cars_list lists it")
    soc_permille: int = Field(
        ge=1, le=1000, description="Target state of charge in permille (800 = 80%)"
    )
    by_ms: int = Field(
        ge=0, le=MAX_JSON_INT, description="When the car should be ready, ms since the epoch"
    )


class SiteModeGoal(_Goal):
    """Run the site in `mode` (a key of registry.yaml `modes`)."""

    goal: Literal[Goal.SITE_MODE]
    mode: Literal[MODES]  # type: ignore[valid-type]


assert {g.value for g in Goal} == {"ev_target", "site_mode"}, "agents.yaml goals changed"


class GoalArgs(RootModel[Annotated[EvTargetGoal | SiteModeGoal, Field(discriminator="goal")]]):
    """`goal_request`'s arguments: one goal of agents.yaml `goals`, chosen by `goal`."""


def _schema(model: type[BaseModel]) -> dict[str, Any]:
    schema = model.model_json_schema()
    schema.pop("title", None)
    schema.pop("description", None)
    schema.setdefault("properties", {})
    for prop in schema["properties"].values():
        prop.pop("title", None)
    return schema


def _goal_schema() -> dict[str, Any]:
    """One object schema with a `oneOf` per goal (no `$defs`: some clients do not follow
    references), `goal` naming the variant; unknown fields are refused in each."""
    variants = [_schema(m) for m in (EvTargetGoal, SiteModeGoal)]
    return {
        "type": "object",
        "properties": {"goal": {"type": "string", "enum": [g.value for g in Goal]}},
        "required": ["goal"],
        "oneOf": variants,
    }


def _obj(required: tuple[str, ...], **props: str) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {k: {"type": v} for k, v in props.items()},
        "required": list(required),
    }


@dataclass(frozen=True, slots=True)
class ControlTool:
    """One control tool as `tools/list` shows it and `/mcp` checks it.

    `parse(arguments)` raises `pydantic.ValidationError`; `scopes` are what the token needs
    (403 `insufficient_scope` naming them, for step-up); `op` is the command's op, None for a
    tool that sends no command."""

    name: str
    title: str
    description: str
    model: type[BaseModel]
    input_schema: dict[str, Any]
    output: dict[str, Any]
    scopes: tuple[Scope, ...]
    destructive: bool
    idempotent: bool
    read_only: bool = False

    def parse(self, arguments: dict[str, Any]) -> Any:
        """The typed arguments (raises `pydantic.ValidationError`)."""
        return self.model.model_validate(arguments, strict=True)

    def definition(self) -> dict[str, Any]:
        """The tool as listed by `tools/list`."""
        return {
            "name": self.name,
            "title": self.title,
            "description": self.description,
            "inputSchema": self.input_schema,
            "outputSchema": OUTPUT_SCHEMAS.get(self.name, self.output),
            "icons": ICONS,
            "annotations": {
                "title": self.title,
                "readOnlyHint": self.read_only,
                "destructiveHint": self.destructive,
                "idempotentHint": self.idempotent,
                "openWorldHint": False,
            },
        }


_COMMAND_OUT = _obj(
    ("cmdId", "state", "charger"),
    cmdId="string",
    state="string",
    charger="string",
    observed="object",
    holdEndsAtMs="integer",
    observedAtMs="integer",
    repeated="boolean",
    firstSentAtMs="integer",
    question="string",
    confirmation="string",
    confirmationExpiresAtMs="integer",
    message="string",
)

CHARGE_NOW = ControlTool(
    "ev_charge_now",
    "Charge the car now",
    "Start charging at a charger now, at power_w W for some minutes (15 unless given; at most"
    " what the owner allowed). The home's box carries it out as a hold that ends by itself;"
    " the result says what the charger actually does (observed) and when the hold ends"
    " (holdEndsAtMs, ms since the epoch). Lasting changes are the owner's: use goal_request."
    " The person confirms every charge: when the answer's state is awaiting_confirmation,"
    " nothing was done yet; show its question to the person, and only if they say yes call"
    " again with the same arguments and its confirmation. An answer with repeated: true is"
    " an earlier attempt's: observed is what the charger did then (observedAtMs), not now.",
    ChargeNowArgs,
    _schema(ChargeNowArgs),
    _COMMAND_OUT,
    (DISPATCH_SCOPE,),
    destructive=True,
    idempotent=False,
)
STOP = ControlTool(
    "ev_stop",
    "Stop charging",
    "End the charge this assistant started at a charger (its hold); the charger goes back to"
    " its own plan. Only a hold this assistant set can be ended this way.",
    StopArgs,
    _schema(StopArgs),
    _COMMAND_OUT,
    (DISPATCH_SCOPE,),
    destructive=False,
    idempotent=True,
)
GOAL = ControlTool(
    "goal_request",
    "Ask the owner",
    "Ask the home's owner for a lasting change, which they approve or deny at home: ev_target"
    " (a car charged to soc_permille by by_ms, ms since the epoch) or site_mode (run the site in"
    " another mode). Nothing changes until the owner approves; requests_list shows the"
    " decision.",
    GoalArgs,
    _goal_schema(),
    _obj(
        ("reqId", "expiresAtMs", "decidedBy"),
        reqId="string",
        expiresAtMs="integer",
        decidedBy="string",
        message="string",
    ),
    (GOAL_SCOPE,),
    destructive=False,
    idempotent=False,
)
REQUESTS = ControlTool(
    "requests_list",
    "Requests to the owner",
    "This assistant's requests to the home's owner (last 30 days) and what the owner decided:"
    " pending, approved, denied or expired.",
    NoArgs,
    _schema(NoArgs),
    _obj(("requests",), requests="array"),
    (READS[Read.REQUESTS_GET].scope,),
    destructive=False,
    idempotent=True,
    read_only=True,
)
CONTROL_TOOLS: Final[tuple[ControlTool, ...]] = (CHARGE_NOW, STOP, GOAL, REQUESTS)
CONTROL_BY_NAME: Final[dict[str, ControlTool]] = {t.name: t for t in CONTROL_TOOLS}
TOOL_SCOPES: Final[frozenset[str]] = frozenset(
    {*(s.value for s in READ_SCOPES), *(s.value for t in CONTROL_TOOLS for s in t.scopes)}
)
"""Every scope a tool of `/mcp` needs: the reads' and control's (RFC 9728 `scopes_supported`)."""
