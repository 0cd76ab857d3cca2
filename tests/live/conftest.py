from tests.pool.conftest import agent, rig, stub

__all__ = ["agent", "rig", "stub"]
