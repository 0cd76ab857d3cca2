"""Shared fixtures: the contract's test vectors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

VECTORS = Path(__file__).parent / "vectors"


@pytest.fixture(scope="session")
def webapp_vectors() -> dict[str, Any]:
    return json.loads((VECTORS / "webapp-vectors.json").read_text())


@pytest.fixture(scope="session")
def cacophony() -> dict[str, Any]:
    return json.loads((VECTORS / "cacophony-IK_25519_ChaChaPoly_SHA256.json").read_text())
