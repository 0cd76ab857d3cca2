"""Warm Noise sessions per agent: open, hello, one call at a time, idle close, revoke."""

from .pool import Pool, PoolStats
from .session import PooledSession, State

__all__ = ["Pool", "PoolStats", "PooledSession", "State"]
