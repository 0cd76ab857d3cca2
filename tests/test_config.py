"""The configuration's rules across settings."""

from __future__ import annotations

import pydantic
import pytest

from ftwbridge.config import Config, load_config


def test_door_silence_must_outlast_a_call() -> None:
    """Issue 11: `door_silence_s` is also the main listener's read timeout, so a shorter one
    cut `/mcp` calls still waiting for their box (the client got no answer at all)."""
    assert Config().door_silence_s >= Config().call_deadline_s + 2
    Config(door_silence_s=10, call_deadline_s=8)
    with pytest.raises(pydantic.ValidationError, match=r"door_silence_s .* call_deadline_s"):
        Config(door_silence_s=5, call_deadline_s=8)
    with pytest.raises(pydantic.ValidationError, match="door_silence_s"):
        load_config(env={"FTWBRIDGE_CALL_DEADLINE_S": "60"})
