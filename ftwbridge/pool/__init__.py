"""Warm Noise sessions per agent: open, hello, one call at a time, idle close, revoke."""

from .homes import PoolStats
from .pool import Pool
from .session import PooledSession, State

__all__ = ["Pool", "PoolStats", "PooledSession", "State"]
