"""One real bridge process for the whole edge suite (started once: it takes some seconds)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .live import LiveBridge


@pytest.fixture(scope="session")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveBridge]:
    bridge = LiveBridge.start(tmp_path_factory.mktemp("edge"))
    try:
        yield bridge
    finally:
        bridge.stop()
