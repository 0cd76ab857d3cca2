"""The stub home's configuration sections (the `config` answer); never a secret."""

from __future__ import annotations

from typing import Any

from .physics import (
    BATTERY_MAX_W,
    CAPACITY_WH,
    CURRENCY,
    ENERGY_TAX_MINOR,
    GRID_FEE_MINOR,
    HOUR_MS,
    RESERVE_WH,
    VAT_PERMILLE,
    ZONE,
)

MODE = "planner_arbitrage"
"""The dispatch mode the box runs (a key of registry.yaml `modes`, which has no enum)."""
PLAN_SLOT_MS = 900_000
PLAN_HOURS = 48
EXPENSIVE_MINOR = 200


def sections(charger_name: str, tz: str) -> dict[str, dict[str, Any]]:
    """Section name -> its settings, units in the key names (W, Wh, permille, ms, minor units);
    `tz` is the box's IANA time zone (`site.timezone`)."""

    return {
        "site": {
            "name": "Stub home",
            "zone": ZONE,
            "currency": CURRENCY,
            "timezone": tz,
            "fuse_a": 25,
            "phases": 3,
        },
        "battery": {
            "capacity_wh": CAPACITY_WH,
            "max_charge_w": BATTERY_MAX_W,
            "max_discharge_w": BATTERY_MAX_W,
            "min_soc_permille": 100,
            "reserve_soc_permille": RESERVE_WH * 1000 // CAPACITY_WH,
            "max_soc_permille": 1000,
            "driver": "battery.pylontech",
        },
        "loadpoints": {
            "lp1": {
                "name": charger_name,
                "charger": "charger.easee",
                "max_power_w": 11_000,
                "min_current_a": 6,
                "max_current_a": 16,
                "phases": 3,
                "default_mode": "pv",
                "car": "car1",
            }
        },
        "tariff": {
            "zone": ZONE,
            "currency": CURRENCY,
            "grid_fee_minor_per_kwh": GRID_FEE_MINOR,
            "energy_tax_minor_per_kwh": ENERGY_TAX_MINOR,
            "vat_permille": VAT_PERMILLE,
            "price_step_ms": HOUR_MS,
        },
        "planner": {
            "mode": MODE,
            "horizon_ms": PLAN_HOURS * HOUR_MS,
            "slot_ms": PLAN_SLOT_MS,
            "replan_every_ms": PLAN_SLOT_MS,
            "ceiling_w": None,
            "expensive_minor_per_kwh": EXPENSIVE_MINOR,
        },
    }
