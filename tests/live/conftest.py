from tests.pool.conftest import agent, pytest_configure, rig, stub

__all__ = ["agent", "pytest_configure", "rig", "stub"]
