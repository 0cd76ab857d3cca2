"""Typed arguments of the read tools: unknown fields refused, bounds from agents.yaml `limits`."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ftwbridge.proto.names import Resolution
from ftwbridge.proto.registry import FROZEN_FIELDS, RESOLUTIONS, limit

HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS
SERIES_NAMES = tuple(FROZEN_FIELDS[i] for i in (2, 3, 4, 5, 6, 10))
_RANGE = re.compile(r"^([1-9][0-9]{0,3})([hd])$")


class _Args(BaseModel):
    """Arguments checked as the advertised `inputSchema` says, no coercion: an integer is a
    JSON integer (not `true`, not `2.5`, not `"2"`), a string a JSON string."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class NoArgs(_Args):
    """A tool without arguments."""


class PlanArgs(_Args):
    hours: int = Field(
        default=limit("plan_hours", "default"),
        ge=1,
        le=limit("plan_hours", "max"),
        description="How many hours ahead",
    )


class HistoryArgs(_Args):
    range: str = Field(
        default="24h", description="How far back: a number and h or d, e.g. 6h, 24h, 7d, 30d"
    )
    series: list[str] = Field(
        default_factory=lambda: ["grid_w", "pv_w", "battery_w", "load_w"],
        min_length=1,
        max_length=limit("history_series", "max"),
        description=f"Series among {', '.join(SERIES_NAMES)}",
    )
    points: int = Field(
        default=limit("history_points", "default"),
        ge=1,
        le=limit("history_points", "max"),
        description="Most points per series",
    )

    @field_validator("range")
    @classmethod
    def _range(cls, v: str) -> str:
        m = _RANGE.fullmatch(v)
        if (
            m is None
            or int(m.group(1)) * (DAY_MS if m.group(2) == "d" else HOUR_MS)
            > RESOLUTIONS[Resolution.R_1H].retention_days * DAY_MS
        ):
            raise ValueError("range must be like 24h or 7d, at most 730d")
        return v

    @field_validator("series")
    @classmethod
    def _series(cls, v: list[str]) -> list[str]:
        bad = [s for s in v if s not in SERIES_NAMES]
        if bad or len(set(v)) != len(v):
            raise ValueError(f"series must be distinct names among {', '.join(SERIES_NAMES)}")
        return v

    def span_ms(self) -> int:
        m = _RANGE.fullmatch(self.range)
        assert m is not None
        return int(m.group(1)) * (DAY_MS if m.group(2) == "d" else HOUR_MS)


class EventsArgs(_Args):
    limit: int = Field(
        default=limit("events_limit", "default"), ge=1, le=limit("events_limit", "max")
    )
    before: str | None = Field(
        default=None, max_length=128, description="Cursor: page to older events"
    )
    after: str | None = Field(
        default=None, max_length=128, description="Cursor: page to newer events"
    )


class LogsArgs(_Args):
    lines: int = Field(default=limit("logs_lines", "default"), ge=1, le=limit("logs_lines", "max"))
    level: Literal["debug", "info", "warn", "error"] = "info"
    before: str | None = Field(default=None, max_length=128)
    after: str | None = Field(default=None, max_length=128)


class ConfigArgs(_Args):
    section: Literal["site", "battery", "loadpoints", "tariff", "planner"]


class DiagArgs(_Args):
    check: Literal["clock", "link", "meter", "planner", "driver"]
    src: str | None = Field(
        default=None,
        max_length=64,
        description="For the driver check (and needed by it): the driver's name, as"
        " drivers_status lists it",
    )
