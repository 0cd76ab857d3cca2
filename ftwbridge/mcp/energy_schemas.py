"""The result models of `energy_report` and `charge_options`: what the bridge makes from the
box's meters (PROTOCOL.md part G) and three reads (docs/energy.md). Energy in kWh with one
decimal, money in the home's currency's major units, times in ms since the Unix epoch."""

from __future__ import annotations

from pydantic import Field

from .schema_base import MS, Absent
from .schema_base import Open as _Open

KWH = "kWh, one decimal"
MONEY = "in major units of the home's currency (currency), or null when the box has no price"


class Figures(_Open):
    importKWh: float = Field(description=f"Energy bought from the grid, {KWH}")
    exportKWh: float = Field(
        description=f"Energy sold to the grid, {KWH} (counted apart from import)"
    )
    pvKWh: float = Field(description=f"Solar energy made, {KWH}")
    loadKWh: float = Field(description=f"House use without the car, {KWH}")
    evKWh: float = Field(description=f"Energy into the car, {KWH}")
    batteryInKWh: float = Field(description=f"Energy into the home battery, {KWH}")
    batteryOutKWh: float = Field(description=f"Energy out of the home battery, {KWH}")
    batteryThroughputKWh: float = Field(description=f"Battery in plus out, {KWH}")
    selfConsumptionPercent: float | None = Field(
        description="Share of the solar the home used itself, percent; null without solar"
    )
    selfSufficiencyPercent: float | None = Field(
        description="Share of house and car use not bought, percent; null without use"
    )
    importCost: float | None = Field(description=f"What the import cost, {MONEY}")
    exportValue: float | None = Field(description=f"What the export earned at spot, {MONEY}")
    currency: str | None = Field(description="ISO 4217 code, or null")


class Change(_Open):
    importPercent: float | None = Field(description="Import change, percent; null from zero")
    exportPercent: float | None = Field(description="Export change, percent; null from zero")
    pvPercent: float | None = Field(description="Solar change, percent; null from zero")
    evPercent: float | None = Field(description="Car energy change, percent; null from zero")
    importCostPercent: float | None = Field(
        description="Import cost change, percent; null without prices or from zero"
    )


class ComparedWith(_Open):
    fromMs: int = Field(description=f"Start of the stretch of the period before, {MS}")
    toMs: int = Field(description=f"End of the stretch of the period before, {MS}")
    thisFromMs: int = Field(description=f"Start of the stretch of this period, {MS}")
    thisToMs: int = Field(description=f"End of the stretch of this period, {MS}")
    words: str = Field(description="The two stretches in words, such as the first 9 whole days")


class StretchFigures(_Open):
    this: Figures = Field(description="This period's stretch")
    before: Figures = Field(description="The same stretch of the period before")


class Period(_Open):
    label: str = Field(description="The period's name in the home's zone, such as December 2026")
    startMs: int = Field(description=f"Period start, {MS}")
    endMs: int = Field(description=f"Period end, {MS} (in the future while running)")
    running: bool = Field(description="True while the period has not ended")
    coveredMs: int = Field(description="How long the meters cover of the period, ms")
    missingMs: int = Field(description="How long of the elapsed period the meters miss, ms")
    coverage: float = Field(description="coveredMs over the time elapsed, 0 to 1")
    figures: Figures = Field(description="The period's energy and money")
    change: Change | None = Field(
        description="Percent changes from the period before (for a running one, from the same"
        " stretch of it, see comparedWith); null when a comparison would mislead"
    )
    noComparison: str | Absent = Field(
        default=None, description="Why change is null, in words (absent when it is given)"
    )
    comparedWith: ComparedWith | Absent = Field(
        default=None, description="A running period only: the two stretches compared"
    )
    stretchFigures: StretchFigures | Absent = Field(
        default=None, description="A running period only: the figures of the two stretches"
    )


class Report(_Open):
    period: str = Field(description="day, week (ISO, from Monday) or month")
    tz: str = Field(description="The home's time zone (IANA); periods start there")
    currency: str | None = Field(description="ISO 4217 code of the money figures, or null")
    periods: list[Period] = Field(description="Oldest first")
    reads: int = Field(description="energy.get requests made for this report (1 or 2)")
    summary: str = Field(description="One sentence about the last period, to repeat")


class Window(_Open):
    startMs: int = Field(description=f"When the cheapest charging run starts, {MS}")
    endMs: int = Field(description=f"When it ends, {MS}")
    minutes: int = Field(description="Its length in whole minutes")
    costMinor: int = Field(description="Its import cost, minor units of the home's currency")


class AdviceArguments(_Open):
    charger: str | Absent = Field(default=None, description="ev_charge_now: the charger's id")
    power_w: int | Absent = Field(default=None, description="ev_charge_now: power, W")
    minutes: int | Absent = Field(default=None, description="ev_charge_now: how long, minutes")
    goal: str | Absent = Field(default=None, description="goal_request: ev_target")
    car: str | Absent = Field(default=None, description="goal_request: the car's id")
    soc_permille: int | Absent = Field(
        default=None, description="goal_request: target charge in permille"
    )
    by_ms: int | Absent = Field(default=None, description=f"goal_request: ready by, {MS}")


class Advice(_Open):
    tool: str = Field(description="ev_charge_now or goal_request")
    arguments: AdviceArguments = Field(description="Its exact arguments")


class ChargeOptions(_Open):
    status: str = Field(
        description="reachable, unreachable, already_met, not_plugged, unknown_car, no_car or"
        " no_charger"
    )
    message: str = Field(description="The advice in one or two sentences")
    acts: bool = Field(description="Always false: this tool changes nothing")
    car: str | None = Field(description="The car's id, or null")
    readyByMs: int = Field(description=f"When it must be ready, {MS}")
    socPercent: float | None = Field(default=None, description="Charge now, percent, or null")
    targetPercent: float | Absent = Field(default=None, description="Target charge, percent")
    needKWh: float | Absent = Field(default=None, description=f"Energy to add, {KWH}")
    charger: str | Absent = Field(default=None, description="The charger's id")
    powerW: int | Absent = Field(default=None, description="The charger's most power, W")
    hoursAvailable: float | Absent = Field(
        default=None, description="Hours of the plan before readyByMs, h"
    )
    solarAloneKWh: float | Absent = Field(
        default=None, description=f"What spare solar alone would give by then, {KWH}"
    )
    assumptions: str | Absent = Field(default=None, description="What the advice assumes")
    reachablePercent: float | Absent = Field(
        default=None, description="unreachable: the most charge by readyByMs, percent"
    )
    window: Window | Absent = Field(default=None, description="reachable: the cheapest run")
    cost: float | Absent = Field(
        default=None, description="reachable: the run's import cost, major units of currency"
    )
    advice: Advice | Absent = Field(
        default=None, description="reachable: the exact tool call that would do it"
    )
