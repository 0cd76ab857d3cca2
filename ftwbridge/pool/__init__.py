"""Warm Noise sessions per agent: open, hello, one call at a time, idle close, revoke."""

from .pool import Pool
from .warm import CallRefused, PoolStats

__all__ = ["CallRefused", "Pool", "PoolStats"]
