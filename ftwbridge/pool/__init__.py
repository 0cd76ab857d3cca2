"""Warm Noise sessions per agent: open, hello, one call at a time, idle close, revoke."""

from .pool import Pool
from .warm import PoolStats

__all__ = ["Pool", "PoolStats"]
