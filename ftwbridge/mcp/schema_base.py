"""What every tool's result model shares (`mcp/schemas.py`, `mcp/energy_schemas.py`): models
that allow members they do not name, so a box that adds one is not refused by a client that
validates, and the words for times and for members sent or left out."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict
from pydantic.json_schema import SkipJsonSchema


class Open(BaseModel):
    """A result model that keeps members it does not name."""

    model_config = ConfigDict(extra="allow")


MS = "ms since the Unix epoch"
Absent = SkipJsonSchema[None]
"""A member a result sends or leaves out, never as null (the schema says only its type)."""
